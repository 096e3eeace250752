"""Benchmark inputs: fresh random images of the upstream PR's sizes and real photographs.

Every call builds new image objects (new random content), so no engine-side cache can serve a
repeat, and no contender benefits from another's decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Workload:
    """``images`` in one call, or split over ``threads`` Python threads calling at once."""

    name: str
    images: list[Image.Image]
    threads: int = 1

    @property
    def medias(self) -> list[dict]:
        return [{"type": "image", "image": image} for image in self.images]

    @property
    def per_thread(self) -> list[list[dict]]:
        """The batch each concurrent caller passes (one call each)."""
        medias = self.medias
        step = max(1, len(medias) // self.threads)
        return [medias[i : i + step] for i in range(0, len(medias), step)]


def random_images(count: int, width: int, height: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        for _ in range(count)
    ]


def photographs() -> list[Image.Image]:
    """scikit-image's bundled photographs, plus phone-sized upscales of three of them."""
    from skimage import data

    natives = [data.astronaut(), data.coffee(), data.rocket(), data.hubble_deep_field(),
               data.retina()]
    images = [Image.fromarray(a) for a in natives]
    images.append(Image.fromarray(data.camera()))  # grayscale: exercises convert("RGB")
    for array, factor in ((data.coffee(), 4), (data.astronaut(), 4), (data.chelsea(), 6)):
        small = Image.fromarray(array)
        images.append(small.resize((small.width * factor, small.height * factor),
                                   Image.Resampling.LANCZOS))
    return images


def default_workloads(seed: int = 0, quick: bool = False) -> list[Workload]:
    if quick:
        return [Workload("2x1024x768", random_images(2, 1024, 768, seed))]
    return [
        Workload("1x2048x2048", random_images(1, 2048, 2048, seed + 2)),
        Workload("1x4032x3024", random_images(1, 4032, 3024, seed + 3)),
        Workload("8x2048x2048", random_images(8, 2048, 2048, seed)),
        Workload("4x1536x1024", random_images(4, 1536, 1024, seed + 1)),
        Workload("4thr x 1x2048", random_images(4, 2048, 2048, seed + 4), threads=4),
        Workload("9 photos", photographs()),
    ]
