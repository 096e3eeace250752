"""Engine patches, one file per patched upstream module (``patches/<engine>/<module>.py``)."""

from .base import Patch, PatchContext, PatchResult, PatchStatus
from .registry import REGISTRY, register

__all__ = ["REGISTRY", "Patch", "PatchContext", "PatchResult", "PatchStatus", "register"]
