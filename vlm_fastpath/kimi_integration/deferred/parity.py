"""Per-pixel agreement of a resize with Pillow's: the |diff| histogram the issue asks for."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MismatchHistogram:
    """Counts of |ours - Pillow| per uint8 value: 0, 1, 2 and more than 2."""

    zero: int = 0
    one: int = 0
    two: int = 0
    more: int = 0
    max_diff: int = 0

    @property
    def total(self) -> int:
        return self.zero + self.one + self.two + self.more

    @property
    def within_one(self) -> float:
        """Fraction of values within one level (the issue's bar: >= 0.999)."""
        return (self.zero + self.one) / self.total if self.total else 1.0

    @property
    def exact(self) -> float:
        return self.zero / self.total if self.total else 1.0

    def __iadd__(self, other: MismatchHistogram) -> MismatchHistogram:
        self.zero += other.zero
        self.one += other.one
        self.two += other.two
        self.more += other.more
        self.max_diff = max(self.max_diff, other.max_diff)
        return self

    def row(self) -> str:
        return (f"0:{self.zero} 1:{self.one} 2:{self.two} >2:{self.more} "
                f"max:{self.max_diff} within1:{100 * self.within_one:.4f}% "
                f"exact:{100 * self.exact:.4f}%")


def mismatch_histogram(ours: torch.Tensor, reference: torch.Tensor) -> MismatchHistogram:
    """Histogram of |ours - reference| over two uint8 tensors of one shape (any devices)."""
    if ours.shape != reference.shape:
        raise ValueError(f"shapes differ: {tuple(ours.shape)} vs {tuple(reference.shape)}")
    diff = (ours.to(torch.int16).cpu() - reference.to(torch.int16).cpu()).abs()
    counts = torch.bincount(diff.clamp(max=3).flatten(), minlength=4).tolist()
    return MismatchHistogram(counts[0], counts[1], counts[2], counts[3],
                             int(diff.max()) if diff.numel() else 0)
