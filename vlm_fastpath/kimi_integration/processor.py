"""``FusedKimiProcessor``: a drop-in, bit-exact, multi-core Kimi K2.5/K2.6 image processor.

Output equals the checkpoint's processor byte for byte (``torch.equal``). Where the installed
Pillow release is verified (:mod:`.resample`), one numba kernel does Pillow's bicubic
arithmetic and writes padded, normalized patches straight into the preallocated output, with
the bands of every image spread over all cores. Otherwise Pillow does the resize (its
arithmetic by construction) on a thread pool, and a patch-major kernel pads, normalizes by a
lookup table built from the checkpoint's exact float ops, and patchifies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, as_completed
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..imaging.batch_feature import batch_feature_cls
from ..imaging.decode import speculation
from ..imaging.image_input import unwrap
from ..imaging.lut import identity_lut
from ..imaging.output_pool import empty_output
from ..imaging.resample import kernel_enabled, resize_patchify, warm_up
from ..imaging.resize_pool import get_pool, pool_size, wait_all
from . import speculative
from .config import KimiMediaConfig
from .errors import KimiInputError, KimiProcessorError
from .image_input import KIMI_INPUT, image_size, to_rgb_image
from .navit_resize import ResizePlan, plan_image, plan_video_chunk
from .normalize_lut import build_normalize_lut
from .patchify_kernel import patchify_frame


def _batch(data: dict[str, Any], return_tensors: Any) -> Mapping[str, Any]:
    cls = batch_feature_cls()
    return data if cls is None else cls(data=data, tensor_type=return_tensors)


def _frames_of(media: Any) -> tuple[str, list[Any]]:
    if not isinstance(media, Mapping):
        raise KimiInputError(
            f"each media must be a dict with a 'type' key, got {type(media).__name__}"
        )
    kind = media.get("type")
    if kind == "image":
        if "image" not in media:
            raise KimiInputError("image media needs an 'image' key")
        return kind, [media["image"]]
    if kind == "video_chunk":
        frames = media.get("video_chunk")
        if isinstance(frames, (str, bytes)) or not isinstance(frames, Sequence):
            raise KimiInputError("video_chunk media needs a list of frames under 'video_chunk'")
        if len(frames) == 0:
            raise KimiInputError("video_chunk has no frames")
        return kind, list(frames)
    raise KimiInputError(f"unsupported media type {kind!r}: expected 'image' or 'video_chunk'")


def _resize_frame(frame: Any, width: int, height: int) -> np.ndarray:
    image = to_rgb_image(frame)
    try:
        resized = image.resize((width, height), resample=Image.Resampling.BICUBIC)
    except OSError as exc:  # truncated or corrupt encoded data surfaces at load time
        raise KimiInputError(f"cannot decode image: {exc}") from exc
    return np.asarray(resized)


class FusedKimiProcessor:
    """Kimi K2.5/K2.6 ``media_proc_cfg`` processor with the engines' processor interface."""

    model_type = "kimi_k25"

    def __init__(self, media_proc_cfg: Mapping[str, Any] | KimiMediaConfig, **_: Any) -> None:
        self.config = KimiMediaConfig.from_dict(media_proc_cfg)
        self.media_proc_cfg = self.config.to_dict()
        self.num_frames_per_chunk = self.config.temporal_merge_kernel_size
        self.normalize_lut = build_normalize_lut(self.config.image_mean, self.config.image_std)
        self._uint8_lut = identity_lut()
        self.last_flags = (True, True)  # do_rescale, do_normalize of the latest call
        warm_up()

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], **kwargs: Any) -> FusedKimiProcessor:
        """Build from a checkpoint folder or its preprocessor_config.json."""
        return cls(KimiMediaConfig.from_pretrained(path), **kwargs)

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any], **kwargs: Any) -> FusedKimiProcessor:
        return cls(config_dict.get("media_proc_cfg", config_dict), **kwargs)

    def __repr__(self) -> str:
        return f"FusedKimiProcessor(media_proc_cfg={self.media_proc_cfg})"

    # -- sizes ---------------------------------------------------------------------------
    def plan(self, media: Mapping[str, Any]) -> ResizePlan:
        """Resize plan of one media item, computed from its size alone (no pixel work)."""
        return self._plan(*_frames_of(media))

    def _plan(self, kind: str, frames: list[Any]) -> ResizePlan:
        width, height = image_size(frames[0])
        if kind == "image":
            return plan_image(self.config, width, height)
        return plan_video_chunk(self.config, width, height, len(frames))

    def get_resize_config(self, media: Mapping[str, Any]) -> dict[str, int]:
        plan = self.plan(media)
        return {
            "num_tokens": plan.num_tokens,
            "new_width": plan.new_width,
            "new_height": plan.new_height,
            "pad_width": plan.pad_width,
            "pad_height": plan.pad_height,
            "sampled_nframes": plan.num_frames,
        }

    def media_tokens_calculator(self, media: Mapping[str, Any]) -> int:
        """Number of placeholder tokens this media item expands to."""
        return self.plan(media).num_tokens

    # -- pixels --------------------------------------------------------------------------
    def _lut(self, do_rescale: bool, do_normalize: bool) -> np.ndarray:
        if do_rescale and do_normalize:
            return self.normalize_lut
        if not do_rescale and not do_normalize:
            return self._uint8_lut
        raise KimiProcessorError(
            "do_rescale and do_normalize must be both True (float32 output) or both False "
            f"(uint8 output for device-side normalization), got {do_rescale}/{do_normalize}"
        )

    def preprocess(
        self,
        medias: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        return_tensors: Any = "pt",
        do_rescale: bool = True,
        do_normalize: bool = True,
        **_: Any,
    ) -> Mapping[str, Any]:
        """Resize, pad, normalize and patchify every media item into one batch.

        Returns ``pixel_values`` ``[N, 3, p, p]`` (float32, or uint8 when both
        ``do_rescale`` and ``do_normalize`` are False) and ``grid_thws`` int64 ``[items, 3]``.
        """
        if isinstance(medias, Mapping):
            medias = [medias]
        if not isinstance(medias, Sequence) or isinstance(medias, (str, bytes)):
            raise KimiInputError(f"medias must be a list of dicts, got {type(medias).__name__}")
        lut = self._lut(do_rescale, do_normalize)
        # what the engine asks for (bytes where vLLM normalizes on the device): the output
        # kind work started on a decoding image guesses (``speculative``)
        self.last_flags = (bool(do_rescale), bool(do_normalize))
        p = self.config.patch_size
        items = [_frames_of(media) for media in medias]
        plans = [self._plan(kind, frames) for kind, frames in items]
        total = sum(plan.num_patches for plan in plans)
        # Built in numpy: a torch op releases the GIL, and taking it back beside a thread
        # that runs Python waits up to the switch interval (5 ms).
        grid_thws = torch.from_numpy(
            np.array([plan.grid_thw for plan in plans], dtype=np.int64).reshape(len(plans), 3)
        )
        ready = self._prepared(items, plans)
        if ready is not None:
            pixel_values = torch.from_numpy(ready)
        else:
            # Recycled memory of a freed output when one fits, else numpy's (which asks the
            # kernel for transparent huge pages on large buffers): output_pool.
            pixel_values = torch.from_numpy(empty_output((total, 3, p, p), lut.dtype))
            self._fill(items, plans, pixel_values.numpy(), lut)
        if return_tensors in ("np", "numpy"):
            data: dict[str, Any] = {
                "pixel_values": pixel_values.numpy(),
                "grid_thws": grid_thws.numpy(),
            }
        else:
            data = {"pixel_values": pixel_values, "grid_thws": grid_thws}
        return _batch(data, None)

    __call__ = preprocess

    def start(self, mode: str, pixels: np.ndarray, progress: Any) -> Any:
        """This processor's call on an image still being decoded
        (``imaging.decode.speculation``; ``speculative``)."""
        return speculative.start(self, mode, pixels, progress)

    def _prepared(self, items: list[tuple[str, list[Any]]], plans: list[ResizePlan]
                  ) -> np.ndarray | None:
        """The output made while the engine's loader decoded a lone image, for these very
        settings; None where there is none."""
        if len(items) != 1 or items[0][0] != "image":
            return None
        frame = items[0][1][0]
        if not speculation.pending(unwrap(frame)):
            return None
        image = KIMI_INPUT.to_rgb(frame)  # the call's own checks, errors included
        return speculation.take(image, self, speculative.key(self.last_flags, plans[0]))

    def _fill(
        self,
        items: list[tuple[str, list[Any]]],
        plans: list[ResizePlan],
        out: np.ndarray,
        lut: np.ndarray,
    ) -> None:
        jobs: list[tuple[Any, ResizePlan, np.ndarray]] = []
        offset = 0
        for (_, frames), plan in zip(items, plans, strict=True):
            for frame in frames:
                jobs.append((frame, plan, out[offset : offset + plan.patches_per_frame]))
                offset += plan.patches_per_frame
        if kernel_enabled() and not _single_unresized(jobs):
            resize_patchify(jobs, lut, KIMI_INPUT)
            return
        if len(jobs) == 1:
            frame, plan, dest = jobs[0]
            _patchify(_resize_frame(frame, plan.new_width, plan.new_height), plan, dest, lut)
            return
        pool = get_pool()
        if len(jobs) >= pool_size():
            # Enough frames to fill every core: each worker resizes and patchifies its own
            # frames with the serial, GIL-free kernel into disjoint slices of ``out``.
            futures = [pool.submit(_resize_and_patchify, *job, lut) for job in jobs]
            wait_all(futures)
            return
        # Fewer frames than cores: resize concurrently, patchify each with all cores.
        pending: dict[Future[np.ndarray], tuple[ResizePlan, np.ndarray]] = {
            pool.submit(_resize_frame, frame, plan.new_width, plan.new_height): (plan, dest)
            for frame, plan, dest in jobs
        }
        try:
            for future in as_completed(list(pending)):
                plan, dest = pending.pop(future)
                _patchify(future.result(), plan, dest, lut)
        finally:
            for future in pending:
                future.cancel()


def _single_unresized(jobs: list[tuple[Any, ResizePlan, np.ndarray]]) -> bool:
    """One frame kept at its size: only pad + normalize + patchify, which the parallel
    patchify kernel does as fast; it keeps that kernel (and its threading layer) in use."""
    if len(jobs) != 1:
        return False
    frame, plan, _ = jobs[0]
    return image_size(frame) == (plan.new_width, plan.new_height)


def _patchify(
    frame: np.ndarray, plan: ResizePlan, dest: np.ndarray, lut: np.ndarray, parallel: bool = True
) -> None:
    patchify_frame(frame, lut, dest, plan.grid_h, plan.grid_w, plan.patch_size, parallel=parallel)


def _resize_and_patchify(frame: Any, plan: ResizePlan, dest: np.ndarray, lut: np.ndarray) -> None:
    resized = _resize_frame(frame, plan.new_width, plan.new_height)
    _patchify(resized, plan, dest, lut, parallel=False)
