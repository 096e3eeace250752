"""Benchmark inputs: deterministic synthetic RGB images, or the user's own image folder.

Images are decoded (and converted to RGB) before any timing, so every contender is timed on
preprocessing alone, never on file decoding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*(?:x\s*(\d+))?\s*$", re.IGNORECASE)
_MAX_SIDE = 16384


class WorkloadError(ValueError):
    """A workload the user asked for cannot be built (bad spec, empty or unreadable folder)."""


@dataclass(frozen=True)
class Workload:
    """One batch of images handed to every contender in a single call."""

    name: str
    images: tuple[Image.Image, ...]

    @property
    def count(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class SyntheticSpec:
    """``COUNTxWIDTHxHEIGHT`` (or ``COUNTxSIDE`` for squares), as typed on the command line."""

    count: int
    width: int
    height: int

    @property
    def name(self) -> str:
        return f"{self.count}x{self.width}x{self.height}"


def parse_spec(text: str) -> SyntheticSpec:
    """Parse ``4x1536x1024`` or ``1x2048``; raises WorkloadError with the accepted forms."""
    match = _SPEC.match(text)
    if match is None:
        raise WorkloadError(
            f"bad workload {text!r}: use COUNTxWIDTHxHEIGHT (e.g. 4x1536x1024) or COUNTxSIDE"
        )
    count, width = int(match[1]), int(match[2])
    height = int(match[3]) if match[3] else width
    if count < 1 or width < 1 or height < 1:
        raise WorkloadError(f"bad workload {text!r}: count and sides must be at least 1")
    if max(width, height) > _MAX_SIDE:
        raise WorkloadError(f"bad workload {text!r}: sides above {_MAX_SIDE} are not supported")
    return SyntheticSpec(count, width, height)


def synthetic(spec: SyntheticSpec, seed: int = 0) -> Workload:
    """Random RGB noise; the seed mixes in the spec so a workload's pixels never depend on order."""
    rng = np.random.default_rng([seed, spec.count, spec.width, spec.height])
    images = tuple(
        Image.fromarray(rng.integers(0, 256, (spec.height, spec.width, 3), dtype=np.uint8))
        for _ in range(spec.count)
    )
    return Workload(spec.name, images)


def image_files(folder: Path) -> list[Path]:
    """Image files directly inside ``folder`` (not recursive), sorted by name."""
    if not folder.is_dir():
        raise WorkloadError(f"--images {folder}: not a directory")
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


def _open_rgb(path: Path) -> Image.Image:
    with Image.open(path) as image:
        image.load()
        return image.convert("RGB") if image.mode != "RGB" else image.copy()


def from_folder(folder: Path) -> tuple[Workload, list[str]]:
    """All readable images of ``folder`` as one workload, plus a note per file that failed."""
    files = image_files(folder)
    if not files:
        raise WorkloadError(
            f"--images {folder}: no images found (looked for {', '.join(IMAGE_SUFFIXES)})"
        )
    images: list[Image.Image] = []
    skipped: list[str] = []
    for path in files:
        try:
            images.append(_open_rgb(path))
        except Exception as exc:  # noqa: BLE001 - a broken file is skipped with its reason
            skipped.append(f"{path.name}: {type(exc).__name__}: {exc}")
    if not images:
        raise WorkloadError(f"--images {folder}: none of its {len(files)} image files is readable")
    return Workload(f"{folder.name or folder} ({len(images)} images)", tuple(images)), skipped
