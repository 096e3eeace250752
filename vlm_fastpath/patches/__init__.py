"""Engine patches, one file per patched upstream module (``patches/<engine>/<module>.py``)."""

from .core.base import Patch, PatchContext, PatchResult, PatchStatus
from .core.registry import REGISTRY, register

__all__ = ["REGISTRY", "Patch", "PatchContext", "PatchResult", "PatchStatus", "register"]
