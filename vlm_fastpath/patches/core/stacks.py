"""The wrapper stacks: which applied patch wraps which attribute, in which order.

Every attribute a patch changes is recorded in its :class:`PatchContext`; the stacks keep the
contexts of applied patches oldest first, so a patch is always installed in its place in the
registry's order (those later in the order that already wrap one of its attributes are taken
off and put back on top), and taking one off also takes off what is stacked on it or requires
it. Not locked: the registry calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .base import Patch, PatchContext


class WrapperStacks:
    """The applied patches' contexts, oldest first."""

    def __init__(self) -> None:
        self.contexts: dict[str, PatchContext] = {}
        self.applied: list[str] = []

    @staticmethod
    def run_apply(patch: Patch) -> tuple[PatchContext | None, str]:
        """Run ``patch.apply``; undone and ``(None, reason)`` where it raises."""
        ctx = PatchContext()
        try:
            patch.apply(ctx)
        except Exception as exc:  # noqa: BLE001
            ctx.undo()
            return None, f"{type(exc).__name__}: {exc}"
        return ctx, ""

    def install(self, patch: Patch, position: Mapping[str, int],
                patches: Mapping[str, Patch]) -> tuple[str, dict[str, str]]:
        """Apply ``patch`` in its place in the order (``position``: name -> rank).

        Returns ``patch``'s failure reason ("" when applied) and the patches that could not be
        put back on top of it, with their reasons.
        """
        ctx, failure = self.run_apply(patch)
        if ctx is None:
            return failure, {}
        mine = position.get(patch.name, len(position))
        later = [n for n in self.applied if position.get(n, -1) > mine]
        above = self._stacked_above(set(ctx.slots()), later, patches)
        if not above:
            self._push(patch.name, ctx)
            return "", {}
        ctx.undo()
        lifted = self.take_off(above)
        ctx, failure = self.run_apply(patch)
        if ctx is not None:
            self._push(patch.name, ctx)
        return failure, self.put_back(lifted, patches)

    def _push(self, name: str, ctx: PatchContext) -> None:
        self.contexts[name] = ctx
        self.applied.append(name)

    def _stacked_above(self, slots: set, candidates: list[str],
                       patches: Mapping[str, Patch]) -> list[str]:
        """Applied patches among ``candidates`` that touch ``slots``, with what they carry."""
        picked = [n for n in candidates if slots & set(self.contexts[n].slots())]
        return self.closure(picked, patches) if picked else []

    def closure(self, names: Iterable[str], patches: Mapping[str, Patch]) -> list[str]:
        """``names`` plus every applied patch stacked on them or requiring them, oldest first."""
        chosen = set(names)
        changed = True
        while changed:
            changed = False
            for name in self.applied:
                if name in chosen:
                    continue
                patch = patches[name]
                needs = set(patch.requires) | set(patch.requires_any)
                if needs & chosen:
                    chosen.add(name)
                    changed = True
                    continue
                mine = set(self.contexts[name].slots())
                earlier = self.applied[: self.applied.index(name)]
                if any(o in chosen and mine & set(self.contexts[o].slots()) for o in earlier):
                    chosen.add(name)
                    changed = True
        return [n for n in self.applied if n in chosen]

    def take_off(self, names: list[str]) -> list[str]:
        """Undo ``names`` (an applied, closed set), newest first; returns them oldest first."""
        for name in reversed(names):
            self.contexts.pop(name).undo()
            self.applied.remove(name)
        return names

    def put_back(self, names: list[str], patches: Mapping[str, Patch]) -> dict[str, str]:
        """Re-apply ``names`` in order; returns those that failed, with their reasons."""
        failed: dict[str, str] = {}
        for name in names:
            ctx, failure = self.run_apply(patches[name])
            if ctx is None:
                failed[name] = failure
                continue
            self._push(name, ctx)
        return failed
