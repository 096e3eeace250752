"""Whether a patch that hands out objects still serves: read by those objects at call time.

A patch turns its entry on with ``ctx.set_attr(SWITCHES, name, True)``; its revert (and a
quarantine) takes the entry off again, so every object it handed out, one the engine built and
cached before the revert included, answers with the engine's own code from then on.
"""

from __future__ import annotations


class Switches:
    """One flag per patch name, off unless the patch set it."""

    def __getattr__(self, name: str) -> bool:
        return False


SWITCHES = Switches()


def active(patch: str) -> bool:
    """Whether ``patch`` is applied now (a module-level function: objects that hold it pickle)."""
    return bool(SWITCHES.__dict__.get(patch, False))
