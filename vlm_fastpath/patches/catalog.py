"""Every patch module, by engine. Listed explicitly so discovery imports nothing else."""

from __future__ import annotations

PATCH_MODULES: tuple[str, ...] = ()
