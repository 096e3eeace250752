"""Images laid out in many Pillow memory blocks, as large photos are under the default 16 MiB
blocks, made small: Pillow's block size is set to 4 KiB (a few rows a block) while they are
created, then restored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PIL import Image

SMALL_BLOCK = 4096  # Pillow's smallest allowed block size


@contextmanager
def pillow_blocks(one_block: bool) -> Iterator[None]:
    """Images created inside sit in one block (Pillow's default for small images) or, with
    ``one_block=False``, in many."""
    block_size = Image.core.get_block_size()
    Image.core.set_block_size(block_size if one_block else SMALL_BLOCK)
    try:
        yield
    finally:
        Image.core.set_block_size(block_size)
