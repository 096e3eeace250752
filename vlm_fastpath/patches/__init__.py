"""Engine patches: one folder per upstream change, one module per patched upstream module.

``patches/<engine>/<change>/<module>.py`` (each folder's ``__init__`` says why it exists, how
it works, its upstream PR, the releases it covers and when it can be deleted); ``core/`` is the
machinery (registry, decisions, stacks, status, containment, the sweep's verified releases);
``adapters/`` holds the engine-neutral objects the patches hand to the engines.
"""

from .core.base import Patch, PatchContext, PatchResult, PatchStatus
from .core.registry import REGISTRY, register

__all__ = ["REGISTRY", "Patch", "PatchContext", "PatchResult", "PatchStatus", "register"]
