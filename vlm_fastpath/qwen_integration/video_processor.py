"""``FastQwen2VLVideoProcessor`` and ``FastQwen3VLVideoProcessor``: transformers' Qwen-VL video
processors with their pixel work replaced, output ``torch.equal`` to theirs.

Why subclasses: everything before the pixels (argument checks, ``size``/``min_pixels``
handling, frame sampling, ``VideoMetadata`` and ``return_metadata``) is the installed
transformers' own code, so sampled frames, metadata and kwargs behave as they do there by
construction, in every release. What is replaced is the costly part:

- ``_prepare_input_videos`` keeps each uint8 RGB video in its own memory (transformers copies
  it into a contiguous ``[T, C, H, W]`` tensor first);
- ``_preprocess`` sizes each video by the installed processor's rule
  (``video_sizing.installed_rule``, probed against transformers' own ``smart_resize``; the
  cap parameters it reads, from the installed ``resize``), then one kernel per frame
  band resizes it with torch's own arithmetic, maps bytes through the LUT of transformers'
  float ops and writes each patch into the frame's temporal slot (``video_kernel``).

Anything else (float frames, 1-channel video, a device, an unknown resample, a transformers
whose sizing rule none of ours reproduces, numba off) goes to transformers' own
``_preprocess`` unchanged: we change speed, never pixels. Bad input raises
``QwenVideoInputError`` (a ``ValueError``, as transformers raises for it) with a message
that names the problem, including inputs transformers passes silently (a video of no frames).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers.image_utils import ChannelDimension
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

try:  # Qwen3-VL from transformers 4.57; Qwen2-VL's twin works without it
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
except ImportError:  # pragma: no cover - exercised by the transformers matrix (4.56)
    Qwen3VLVideoProcessor = None
from transformers.video_utils import infer_channel_dimension_format

from ..imaging.output_pool import empty_output
from .config import BICUBIC, TORCHVISION
from .errors import QwenConfigError, QwenVideoInputError, QwenVideoTooLargeError
from .normalize_lut import build_lut
from .video_kernel import VideoPlan, fill_videos, kernels_available
from .video_sizing import QWEN2, QWEN3, installed_rule

MAX_FRAMES = 32768  # per video: 18 min of 30 fps frames unsampled, beyond any model's context

# transformers methods whose arithmetic ours reproduces; a subclass overriding any of them
# computes something else, so ``from_hf`` refuses it.
_REPRODUCED = ("_preprocess", "resize", "patchify", "rescale_and_normalize",
               "_prepare_input_videos")


class VideoFrames:
    """One uint8 RGB video in the memory it came in: ``[T, H, W, 3]`` (``channels_last``) or
    ``[T, 3, H, W]``, numpy (a CPU tensor's own memory). ``shape`` is transformers' view of
    it, ``[T, C, H, W]``."""

    __slots__ = ("array", "channels_last")

    def __init__(self, array: np.ndarray, channels_last: bool) -> None:
        self.array = array
        self.channels_last = channels_last

    @property
    def shape(self) -> torch.Size:
        t, a, b, c = self.array.shape
        return torch.Size((t, c, a, b) if self.channels_last else (t, a, b, c))

    @property
    def frame_size(self) -> tuple[int, int]:
        shape = self.shape
        return int(shape[2]), int(shape[3])

    def tensor(self) -> torch.Tensor:
        """What transformers' ``_prepare_input_videos`` makes of it (a contiguous
        ``[T, C, H, W]`` uint8 tensor)."""
        video = torch.from_numpy(self.array)
        if self.channels_last:
            video = video.permute(0, 3, 1, 2)
        return video.contiguous()


def _max_frame_pixels() -> int | None:
    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


def _as_numpy_uint8(video: Any) -> np.ndarray | None:
    """The video's uint8 array without a copy, or None for anything we leave to transformers."""
    if isinstance(video, np.ndarray):
        array = video
    elif isinstance(video, torch.Tensor):
        if video.device.type != "cpu" or video.dtype != torch.uint8 or video.requires_grad:
            return None
        array = video.numpy()
    else:
        return None
    return array if array.dtype == np.uint8 and array.ndim == 4 else None


def _check_frame_lists(videos: Any) -> None:
    """Frames given as a list (one video) must share one size: a clear error here where
    transformers' ``np.stack`` fails with numpy's message."""
    if not isinstance(videos, (list, tuple)) or not videos:
        return
    frames = [v for v in videos if isinstance(v, (np.ndarray, torch.Tensor)) and v.ndim == 3]
    if len(frames) == len(videos):
        shapes = {tuple(f.shape) for f in frames}
        if len(shapes) > 1:
            raise QwenVideoInputError(
                f"the frames of one video must share one size, got shapes {sorted(shapes)}"
            )
        return
    for item in videos:
        if isinstance(item, (list, tuple)):
            _check_frame_lists(item)


class _FastVideoMixin:
    """The replaced steps, shared by both processors (``_rule`` names the sizing rule)."""

    _rule: str = QWEN2

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_processor: Any) -> Any:
        """This processor with ``hf_processor``'s settings (its instance attributes), which
        must be a transformers processor of the class this one extends, arithmetic unchanged
        (a subclass overriding a replaced step raises ``QwenConfigError``). Run
        ``check_video_compatible`` to prove the result equal before swapping it in."""
        base = cls.__mro__[2]
        if not isinstance(hf_processor, base):
            raise QwenConfigError(
                f"{cls.__name__} mirrors a {base.__name__}, got {type(hf_processor).__name__}"
            )
        for name in _REPRODUCED:  # a step this transformers lacks (inlined) cannot differ
            if getattr(type(hf_processor), name, None) is not getattr(base, name, None):
                raise QwenConfigError(
                    f"{type(hf_processor).__name__} overrides {name}: its output is not "
                    f"{base.__name__}'s, which is what {cls.__name__} reproduces"
                )
        fast = cls.__new__(cls)
        fast.__dict__.update(vars(hf_processor))
        return fast

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()  # type: ignore[misc]
        data["video_processor_type"] = type(self).__mro__[2].__name__  # the class we stand for
        return data

    # -- front end ---------------------------------------------------------------------------
    def _decode_and_sample_videos(self, videos: Any, *args: Any, **kwargs: Any) -> Any:
        _check_frame_lists(videos)
        return super()._decode_and_sample_videos(videos, *args, **kwargs)  # type: ignore[misc]

    def _prepare_input_videos(
        self,
        videos: Sequence[Any],
        input_data_format: str | ChannelDimension | None = None,
        device: str | None = None,
        **release_kwargs: Any,
    ) -> list[Any]:
        """Our frames for uint8 RGB videos on the CPU; any other video goes to transformers'
        own step with what this release passed (``do_convert_rgb`` only from 5.18 on)."""
        prepared: list[Any] = []
        for video in videos:
            array = _as_numpy_uint8(video)
            if array is not None and len(array) == 0:
                raise QwenVideoInputError("a video needs at least one frame, got 0")
            if input_data_format is None and getattr(video, "ndim", 0) == 4:
                # as transformers: the first video's layout is inferred and kept for the rest
                input_data_format = infer_channel_dimension_format(video)
            fmt = ChannelDimension(input_data_format) if input_data_format is not None else None
            last = fmt == ChannelDimension.LAST
            channels = None if array is None else array.shape[3 if last else 1]
            if array is None or channels != 3 or (device is not None and str(device) != "cpu"):
                prepared.extend(super()._prepare_input_videos(  # type: ignore[misc]
                    [video], input_data_format=input_data_format, device=device,
                    **release_kwargs))
                continue
            frames = VideoFrames(array, last)
            _check_size(frames)
            prepared.append(frames)
        return prepared

    # -- pixels ------------------------------------------------------------------------------
    def _preprocess(self, videos: list[Any], **kwargs: Any) -> Any:
        plans = None
        if all(isinstance(v, VideoFrames) for v in videos) and videos:
            plans = self._fast_plans(videos, kwargs)
        if plans is None:
            tensors = [v.tensor() if isinstance(v, VideoFrames) else v for v in videos]
            return super()._preprocess(videos=tensors, **kwargs)  # type: ignore[misc]
        lut = self._lut(kwargs)
        total = sum(plan.num_patches for plan in plans)
        out = empty_output((total, plans[0].row_length), lut.dtype)
        outs, offset = [], 0
        for plan in plans:
            outs.append(out[offset:offset + plan.num_patches])
            offset += plan.num_patches
        fill_videos([v.array for v in videos], [v.channels_last for v in videos], plans, outs,
                    lut)
        grid = torch.tensor([[plan.grid_t, plan.grid_h, plan.grid_w] for plan in plans])
        from transformers import BatchFeature

        return BatchFeature(
            data={"pixel_values_videos": torch.from_numpy(out), "video_grid_thw": grid},
            tensor_type=kwargs.get("return_tensors"),
        )

    def _fast_plans(
        self, videos: list[VideoFrames], kw: Mapping[str, Any]
    ) -> list[VideoPlan] | None:
        """One plan per video, or None where transformers' own path must run: settings we do
        not reproduce (it then raises its own errors where it has them)."""
        resample = kw.get("resample")
        if getattr(resample, "value", resample) not in (BICUBIC, "bicubic"):
            return None
        if not kernels_available():
            return None
        p, m, t = kw.get("patch_size"), kw.get("merge_size"), kw.get("temporal_patch_size")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (p, m, t)):
            return None
        if kw.get("do_normalize") and (kw.get("image_mean") is None or kw.get("image_std") is None):
            return None
        params = inspect.signature(self.resize).parameters  # type: ignore[attr-defined]
        rule = installed_rule(self._rule)  # the installed transformers' sizing, probed
        if rule is None:
            return None
        size = kw.get("size")
        shortest = getattr(size, "shortest_edge", None)
        longest = getattr(size, "longest_edge", None)
        do_resize = kw.get("do_resize")
        if do_resize and (not shortest or not longest):
            return None
        tokens = getattr(self, "max_video_tokens", 0)
        if "max_video_tokens" in params and kw.get("max_video_tokens") is not None:
            tokens = kw["max_video_tokens"]
        plans = []
        for video in videos:
            frames = len(video.array)
            height, width = video.frame_size
            if do_resize:
                height, width = rule(frames, height, width, factor=p * m, temporal_factor=t,
                                     min_pixels=shortest, max_pixels=longest,
                                     capped=bool(kw.get("cap_pixels_per_frame")),
                                     max_video_tokens=tokens)
            elif height % (p * m) or width % (p * m):
                return None
            plans.append(VideoPlan(frames, height, width, p, m, t))
        return plans

    def _lut(self, kw: Mapping[str, Any]) -> np.ndarray:
        mean, std = kw.get("image_mean"), kw.get("image_std")
        key = (bool(kw.get("do_rescale")), float(kw.get("rescale_factor") or 0.0),
               bool(kw.get("do_normalize")),
               None if mean is None else tuple(np.atleast_1d(mean).tolist()),
               None if std is None else tuple(np.atleast_1d(std).tolist()))
        lut = _LUTS.get(key)
        if lut is None:
            lut = build_lut(TORCHVISION, do_rescale=key[0], rescale_factor=key[1],
                            do_normalize=key[2], image_mean=_triple(key[3]),
                            image_std=_triple(key[4]))
            _LUTS[key] = lut
        return lut


# (do_rescale, rescale_factor, do_normalize, mean, std) -> table; module-wide, so a processor
# object (a twin shares the engine's) never gains an attribute of ours
_LUTS: dict[tuple[Any, ...], np.ndarray] = {}


def _triple(values: tuple[float, ...] | None) -> tuple[float, float, float]:
    if values is None:
        return (0.0, 0.0, 1.0)
    return (values[0],) * 3 if len(values) == 1 else values  # type: ignore[return-value]


def _check_size(frames: VideoFrames) -> None:
    count = len(frames.array)
    if count > MAX_FRAMES:
        raise QwenVideoTooLargeError(f"a video of {count} frames exceeds {MAX_FRAMES}")
    height, width = frames.frame_size
    limit = _max_frame_pixels()
    if limit is not None and height * width > limit:
        raise QwenVideoTooLargeError(
            f"frames of {width}x{height} = {height * width} pixels exceed the limit of {limit} "
            "(2 * PIL.Image.MAX_IMAGE_PIXELS)"
        )
    if height == 0 or width == 0:
        raise QwenVideoInputError(f"frames of {width}x{height} have no pixels")


class FastQwen2VLVideoProcessor(_FastVideoMixin, Qwen2VLVideoProcessor):
    """``Qwen2VLVideoProcessor`` (Qwen2-VL, Qwen2.5-VL) with the pixel work on every core."""

    _rule = QWEN2


FAST_CLASSES: dict[type, type] = {Qwen2VLVideoProcessor: FastQwen2VLVideoProcessor}

if Qwen3VLVideoProcessor is not None:

    class FastQwen3VLVideoProcessor(_FastVideoMixin, Qwen3VLVideoProcessor):
        """``Qwen3VLVideoProcessor`` (Qwen3-VL: patch 16, its own sizing) on every core."""

        _rule = QWEN3

    FAST_CLASSES[Qwen3VLVideoProcessor] = FastQwen3VLVideoProcessor


def fast_class_for(hf_processor: Any) -> type:
    """Our class for a transformers Qwen-VL video processor, or raises ``QwenConfigError``."""
    for base, fast in FAST_CLASSES.items():
        if type(hf_processor) is base or (isinstance(hf_processor, base)
                                          and not isinstance(hf_processor, _FastVideoMixin)):
            return fast
    raise QwenConfigError(f"no fast twin for {type(hf_processor).__name__}")


def fast_video_processor(hf_processor: Any) -> Any:
    """The fast twin of a transformers Qwen-VL video processor (``from_hf``), or raises
    ``QwenConfigError`` for any other class."""
    return fast_class_for(hf_processor).from_hf(hf_processor)
