"""``FastQwen2VLImageProcessor``: a drop-in, bit-exact, multi-core Qwen2/2.5/3-VL image processor.

Exact to the transformers processor it replaces (``torch.equal`` on ``pixel_values`` and
``image_grid_thw``): the resize is that processor's own arithmetic (torch's uint8 antialiased
bicubic for the torchvision processor: both passes in numba with torch's int16 taps, proven
against torch; Pillow's bicubic for the PIL one), and one patch kernel maps bytes
through a table built from that processor's float operations, tiles each frame
``temporal_patch_size`` times and writes the patches in merge order into one preallocated
output. A batch whose images each change size on both sides (torch's resize) or keep it
runs as one GIL-free job loop over every image's bands
(``patchify_kernel.resize_patchify_frames``); other batches resize on a thread pool,
overlapping the kernel.

Images only: videos have their own twin (``video_processor``), as in transformers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..imaging.batch_feature import batch_feature_cls
from ..imaging.decode import speculation
from ..imaging.decode.decoded_image import held_rgb
from ..imaging.output_pool import empty_output
from ..imaging.pillow_pixels import rgbx_copy, rgbx_view
from ..imaging.resize_pool import get_pool, pool_size, wait_all
from ..imaging.torch_taps import AxisTaps, axis_taps
from . import compact, speculative
from .config import PIL, TORCHVISION, QwenImageConfig
from .errors import QwenConfigError, QwenInputError
from .hf_config import config_from_hf
from .image_input import flatten_images, image_size, to_rgb
from .normalize_lut import build_lut
from .patchify_kernel import (
    horizontal_pass,
    patchify_frame,
    resize_patchify_frame,
    resize_patchify_frames,
    vertical_kernels_available,
    vertical_patchify_frame,
)
from .resize import KernelPillowResizer, Resizer, TorchResizer
from .rgb_rules import HONOURED, IGNORED, RgbRules, installed, probe
from .smart_resize import smart_resize

# Per-call keys that change nothing in our output (or are transformers plumbing).
_IGNORED_KWARGS = frozenset(
    {"data_format", "disable_grouping", "default_to_square", "image_seq_length", "do_pad",
     "pad_size", "do_center_crop", "crop_size", "input_data_format_is_set"}
)


@dataclass(frozen=True)
class _Plan:
    height: int
    width: int
    grid_h: int
    grid_w: int

    @property
    def num_patches(self) -> int:
        return self.grid_h * self.grid_w


class FastQwen2VLImageProcessor:
    """Qwen2-VL-family image processor with transformers' interface and exact output."""

    model_input_names = ["pixel_values", "image_grid_thw"]

    def __init__(
        self,
        config: QwenImageConfig | Mapping[str, Any] | None = None,
        *,
        mode: str | None = None,
        resizer: Resizer | None = None,
        rgb_rules: RgbRules | None = None,
        **kwargs: Any,
    ) -> None:
        if config is None:
            config = QwenImageConfig.from_dict(kwargs, mode=mode)
        elif not isinstance(config, QwenImageConfig):
            config = QwenImageConfig.from_dict({**config, **kwargs}, mode=mode)
        else:
            if mode is not None and mode != config.mode:
                config = replace(config, mode=mode)
            if kwargs:
                config = config.with_overrides(kwargs)
        self.config = config
        self._resizer = resizer if resizer is not None else _default_resizer(config.mode)
        # torch's resize: both passes in numba with torch's taps, the vertical one fused with
        # the patch kernel (``_stage``); False runs torch's whole resize then the patch kernel.
        self.fuse_vertical_pass = isinstance(self._resizer, TorchResizer)
        self._luts: dict[tuple[Any, ...], np.ndarray] = {}
        # How transparent images and 4-channel arrays become RGB: the mirrored processor's
        # (probed by from_hf), else the installed transformers' for this mode, probed at the
        # first image that needs it (rgb_rules).
        self._rgb_rules = rgb_rules
        self.last_config = config  # the settings of the latest call

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], *, mode: str | None = None, **kwargs: Any
    ) -> FastQwen2VLImageProcessor:
        """From a checkpoint folder (its preprocessor_config.json) or that file's path."""
        config = QwenImageConfig.from_pretrained(path, mode=mode)
        return cls(config.with_overrides(kwargs) if kwargs else config)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], **kwargs: Any) -> FastQwen2VLImageProcessor:
        return cls(dict(config), **kwargs)

    @classmethod
    def from_hf(cls, hf_processor: Any) -> FastQwen2VLImageProcessor:
        """Mirror a transformers Qwen2-VL image processor's settings (and its arithmetic:
        torchvision or PIL). Raises ``QwenConfigError`` for settings not reproduced exactly;
        run ``check_compatible`` to prove the result equal before swapping it in."""
        config = config_from_hf(hf_processor)
        return cls(config, rgb_rules=probe(hf_processor, config))

    def rgb_rules(self) -> RgbRules:
        """How transparent images and 4-channel arrays become RGB here (``rgb_rules``)."""
        if self._rgb_rules is None:
            self._rgb_rules = installed(self.config.mode)
        return self._rgb_rules

    # -- transformers-like attributes ------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def backend(self) -> str:
        return self.config.mode

    @property
    def size(self) -> dict[str, int]:
        return self.config.size

    @property
    def min_pixels(self) -> int:
        return self.config.min_pixels

    @property
    def max_pixels(self) -> int:
        return self.config.max_pixels

    @property
    def patch_size(self) -> int:
        return self.config.patch_size

    @property
    def temporal_patch_size(self) -> int:
        return self.config.temporal_patch_size

    @property
    def merge_size(self) -> int:
        return self.config.merge_size

    @property
    def image_mean(self) -> tuple[float, float, float]:
        return self.config.image_mean

    @property
    def image_std(self) -> tuple[float, float, float]:
        return self.config.image_std

    @property
    def rescale_factor(self) -> float:
        return self.config.rescale_factor

    @property
    def do_rescale(self) -> bool:
        return self.config.do_rescale

    @property
    def do_normalize(self) -> bool:
        return self.config.do_normalize

    @property
    def do_resize(self) -> bool:
        return self.config.do_resize

    @property
    def do_convert_rgb(self) -> bool:
        return self.config.do_convert_rgb

    @property
    def resample(self) -> int:
        return self.config.resample

    def to_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def __repr__(self) -> str:
        return f"FastQwen2VLImageProcessor({self.config.to_dict()}, resizer={self._resizer.name})"

    # -- sizes -----------------------------------------------------------------------------
    def get_number_of_image_patches(
        self, height: int, width: int, images_kwargs: Mapping[str, Any] | None = None
    ) -> int:
        """Patches (before merging) of an image of this size; vLLM calls it for placeholders."""
        config = self.config.with_overrides(images_kwargs or {})
        new_h, new_w = smart_resize(
            height, width, config.factor, config.min_pixels, config.max_pixels
        )
        return (new_h // config.patch_size) * (new_w // config.patch_size)

    def _plan(self, config: QwenImageConfig, height: int, width: int) -> _Plan:
        if config.do_resize:
            new_h, new_w = smart_resize(
                height, width, config.factor, config.min_pixels, config.max_pixels
            )
        else:
            if height % config.factor or width % config.factor:
                raise QwenInputError(
                    f"with do_resize=False the image ({width}x{height}) must be a multiple of "
                    f"patch_size * merge_size = {config.factor} on both sides"
                )
            new_h, new_w = height, width
        return _Plan(new_h, new_w, new_h // config.patch_size, new_w // config.patch_size)

    # -- pixels ----------------------------------------------------------------------------
    def _lut(self, config: QwenImageConfig) -> np.ndarray:
        unscaled = not (config.do_rescale or config.do_normalize)
        uint8 = self.rgb_rules().unscaled_uint8 if unscaled else None
        key = (config.mode, config.do_rescale, config.rescale_factor, config.do_normalize,
               config.image_mean, config.image_std, uint8)
        lut = self._luts.get(key)
        if lut is None and uint8 is not None:
            # the bytes themselves, as the mirrored processor returns them unscaled (uint8,
            # or float32 from the PIL processor of transformers 5.15+): rgb_rules
            lut = np.tile(np.arange(256, dtype=np.uint8 if uint8 else np.float32), (3, 1))
            self._luts[key] = lut
        elif lut is None:
            lut = build_lut(
                config.mode,
                do_rescale=config.do_rescale,
                rescale_factor=config.rescale_factor,
                do_normalize=config.do_normalize,
                image_mean=config.image_mean,
                image_std=config.image_std,
            )
            self._luts[key] = lut
        return lut

    def preprocess(
        self,
        images: Any = None,
        videos: Any = None,
        return_tensors: Any = None,
        **kwargs: Any,
    ) -> Mapping[str, Any]:
        """Resize, normalize and patchify every image into one batch.

        Returns ``pixel_values`` ``[patches, 3 * temporal_patch_size * patch_size**2]``
        (``[patches, 3 * patch_size**2]`` inside ``compact.emitting()``)
        (float32; uint8 in torchvision mode with rescale and normalize both off) and
        ``image_grid_thw`` int64 ``[images, 3]``, as a ``BatchFeature`` when transformers is
        importable. Per-call kwargs override the settings as in transformers (``size``, then
        ``min_pixels``/``max_pixels``; ``do_rescale``, ``do_normalize``, ``image_mean``...).
        """
        if videos is not None:
            raise QwenInputError(
                "videos are not handled by the image processor; route them to the video processor"
            )
        if images is None:
            raise QwenInputError("no images given")
        device = kwargs.pop("device", None)
        if device is not None and str(device) != "cpu":
            raise QwenConfigError(f"only device='cpu' is reproduced exactly, got {device!r}")
        input_data_format = kwargs.pop("input_data_format", None)
        if input_data_format is not None:
            input_data_format = getattr(input_data_format, "value", input_data_format)
        return_tensors = kwargs.pop("return_tensors", return_tensors)
        _check_return_tensors(return_tensors)
        for key in _IGNORED_KWARGS:
            kwargs.pop(key, None)
        _follow_lone_limits(kwargs, self.rgb_rules)
        config = self.config.with_overrides(kwargs) if kwargs else self.config
        if config.temporal_patch_size > 1 and compact.wanted():
            # each patch once (``compact``): the engine's tower restores the temporal copies
            config = replace(config, temporal_patch_size=1)
        # what the engine asks for (vLLM's device normalization asks for bytes): the settings
        # work started on a decoding image guesses (``speculative``)
        self.last_config = config
        flat = flatten_images(images)
        if not flat:
            raise QwenInputError("no images given")
        rgb = [
            to_rgb(img, do_convert_rgb=config.do_convert_rgb, input_data_format=input_data_format,
                   rules=self.rgb_rules)
            for img in flat
        ]
        plans = [self._plan(config, *image_size(img)) for img in rgb]
        lut = self._lut(config)
        p, t = config.patch_size, config.temporal_patch_size
        total = sum(plan.num_patches for plan in plans)
        out = None
        if len(rgb) == 1 and input_data_format is None:
            # made while the engine's loader decoded this image, for these very settings
            out = speculation.take(rgb[0], self, speculative.key(config, plans[0]))
        if out is None:
            # Recycled memory of a freed output when one fits, else numpy's (transparent
            # huge pages on large buffers): imaging.output_pool.
            out = empty_output((total, 3 * t * p * p), lut.dtype)
            self._fill(rgb, plans, out, lut, config)
        # Built in numpy: a torch op releases the GIL, and taking it back beside a thread that
        # runs Python waits up to the switch interval (5 ms).
        grid = np.array([[1, plan.grid_h, plan.grid_w] for plan in plans], np.int64)
        return _batch(torch.from_numpy(out), torch.from_numpy(grid.reshape(len(plans), 3)),
                      return_tensors, config.mode)

    __call__ = preprocess

    def start(self, mode: str, pixels: np.ndarray, progress: Any) -> Any:
        """This processor's call, with its latest settings, on an image still being decoded
        (``imaging.decode.speculation``; ``speculative``)."""
        return speculative.start(self, mode, pixels, progress)

    def _fill(
        self,
        images: list[Image.Image | np.ndarray],
        plans: list[_Plan],
        out: np.ndarray,
        lut: np.ndarray,
        config: QwenImageConfig,
    ) -> None:
        jobs: list[tuple[Image.Image | np.ndarray, _Plan, np.ndarray]] = []
        offset = 0
        for image, plan in zip(images, plans, strict=True):
            jobs.append((image, plan, out[offset : offset + plan.num_patches]))
            offset += plan.num_patches
        workers = pool_size()
        if len(jobs) == 1:
            image, plan, dest = jobs[0]
            _patchify(self._stage(image, plan, get_pool() if workers > 1 else None), plan,
                      dest, lut, config)
            return
        pool = get_pool()
        if self._fill_in_one_loop(jobs, lut, config, pool, workers):
            return
        if len(jobs) >= workers:
            # Enough images to fill every core: each worker resizes and patchifies its own
            # images with the serial GIL-free kernel into disjoint slices of ``out``.
            futures = [pool.submit(self._resize_and_patchify, *job, lut, config) for job in jobs]
            wait_all(futures)
            return
        pending: dict[Future[_Staged], tuple[_Plan, np.ndarray]] = {
            pool.submit(self._stage, image, plan): (plan, dest) for image, plan, dest in jobs
        }
        try:
            for future in as_completed(list(pending)):
                plan, dest = pending.pop(future)
                _patchify(future.result(), plan, dest, lut, config)
        finally:
            for future in pending:
                future.cancel()

    def _fill_in_one_loop(
        self,
        jobs: list[tuple[Image.Image | np.ndarray, _Plan, np.ndarray]],
        lut: np.ndarray,
        config: QwenImageConfig,
        pool: Executor,
        workers: int,
    ) -> bool:
        """Several images each of which changes both its width and height (torch's resize;
        the common case) or neither (a size already in whole patches, such as a 4032x3024
        phone photo): all their bands in one GIL-free job loop
        (``resize_patchify_frames``), so the call takes the GIL back once, not once per
        image. False, with nothing written, where any image changes one side only."""
        if not (self.fuse_vertical_pass and vertical_kernels_available()):
            return False
        resized = []
        for image, plan, _ in jobs:
            height, width = image_size(image)
            if (height == plan.height) != (width == plan.width):
                return False
            resized.append(height != plan.height)
        frames = []
        keep = []
        for (image, plan, dest), resize in zip(jobs, resized, strict=True):
            pixels, keepalive = _pixels(image, pool)
            keep.append(keepalive)
            taps = axis_taps(pixels.shape[0], plan.height) if resize else None
            frames.append((pixels, taps, dest, plan.grid_h, plan.grid_w))
        done = resize_patchify_frames(frames, lut, config.patch_size, config.merge_size,
                                      config.temporal_patch_size, pool=pool, workers=workers)
        del keep, frames  # Pillow's memory was read until here
        return done

    def _resize_and_patchify(
        self,
        image: Image.Image | np.ndarray,
        plan: _Plan,
        dest: np.ndarray,
        lut: np.ndarray,
        config: QwenImageConfig,
    ) -> None:
        _patchify(self._stage(image, plan), plan, dest, lut, config, parallel=False)

    def _stage(
        self, image: Image.Image | np.ndarray, plan: _Plan, pool: Executor | None = None
    ) -> _Staged:
        """What runs before the patch kernel: the whole resize, or (torch's resize, numba on)
        nothing where both sides change (the patch kernel then runs both passes), else the
        horizontal pass by our kernel (row bands on ``pool`` if given), and the vertical
        pass's taps where the height changes."""
        if self.fuse_vertical_pass and vertical_kernels_available():
            pixels, keepalive = _pixels(image, pool)
            if pixels.shape[1] != plan.width and pixels.shape[0] != plan.height:
                # both passes in one kernel, in bands of patch rows (``_patchify``)
                return _Staged([pixels], axis_taps(pixels.shape[0], plan.height), keepalive,
                               resize_width=True)
            if pixels.shape[1] != plan.width:
                workers = pool_size() if pool is not None else 1
                pixels = horizontal_pass(pixels, plan.width, pool, workers)
                keepalive = None  # a new array: Pillow's memory is no longer read
            if pixels.shape[0] != plan.height:
                return _Staged([pixels], axis_taps(pixels.shape[0], plan.height), keepalive)
            return _Staged([pixels], None, keepalive)
        return _Staged([self._resizer(image, plan.height, plan.width)], None)


def _pixels(image: Image.Image | np.ndarray, pool: Executor | None) -> tuple[np.ndarray, Any]:
    """``(HWC uint8 pixels, keepalive)`` of an RGB image or array, C-contiguous (hold
    ``keepalive`` while they are read). A PIL image gives Pillow's own 4-byte RGBX pixels
    where Pillow can export them in place, else a copy (:mod:`~vlm_fastpath.
    imaging.pillow_pixels`; in strips on ``pool`` if given): the kernels read RGBX
    as RGB, giving the same bytes."""
    if not isinstance(image, Image.Image):
        return np.ascontiguousarray(image), None
    held = held_rgb(image)  # decoded by imaging.decode, not yet copied into Pillow's store
    if held is not None:
        return held, None
    width, height = image.size
    view = rgbx_view(image)
    if view is not None:
        rows, keepalive = view
        return rows.reshape(height, width, 4), keepalive
    copied = rgbx_copy(image, pool, pool_size() if pool is not None else 1)
    if copied is None:
        return np.asarray(image), None
    return copied.reshape(height, width, 4), None


def _follow_lone_limits(kwargs: dict[str, Any], rules: Any) -> None:
    """A per-call ``min_pixels`` or ``max_pixels`` given alone, as the mirrored processor
    takes it (rgb_rules: transformers before 5.18 ignores it; only the pair overrides)."""
    given = [key for key in ("min_pixels", "max_pixels") if kwargs.get(key) is not None]
    if len(given) != 1:
        return
    lone = rules().lone_limits
    if lone == IGNORED:
        kwargs.pop(given[0])
    elif lone != HONOURED:
        raise QwenConfigError(
            f"a per-call {given[0]} alone: the installed transformers takes it in a way "
            "vlm-fastpath does not reproduce"
        )


def _default_resizer(mode: str) -> Resizer:
    if mode == TORCHVISION:
        return TorchResizer()
    if mode == PIL:
        return KernelPillowResizer()
    raise QwenConfigError(f"unknown mode {mode!r}")


@dataclass(frozen=True)
class _Staged:
    """What the patch kernel reads: [the resized frame] and no taps; or the frame resized to
    its final width and the vertical taps; or (``resize_width``) the pixels themselves and
    the vertical taps, both passes left to the kernel; and what keeps Pillow's memory valid
    where the frame is a view of it."""

    frames: list[np.ndarray]
    taps: AxisTaps | None
    keepalive: Any = None
    resize_width: bool = False  # the frame is the pixels: the patch kernel runs both passes


def _patchify(
    staged: _Staged,
    plan: _Plan,
    dest: np.ndarray,
    lut: np.ndarray,
    config: QwenImageConfig,
    parallel: bool = True,
) -> None:
    p, m, t = config.patch_size, config.merge_size, config.temporal_patch_size
    if staged.resize_width:
        assert staged.taps is not None
        workers = pool_size() if parallel else 1
        resize_patchify_frame(staged.frames[0], staged.taps, lut, dest, plan.grid_h,
                              plan.grid_w, p, m, t, pool=get_pool() if workers > 1 else None,
                              workers=workers)
    elif staged.taps is None:
        patchify_frame(np.asarray(staged.frames[0]), lut, dest, plan.grid_h, plan.grid_w,
                       p, m, t, parallel=parallel)
    else:
        vertical_patchify_frame(staged.frames, staged.taps, lut, dest, plan.grid_h,
                                plan.grid_w, p, m, t, parallel=parallel)


def _check_return_tensors(return_tensors: Any) -> None:
    kind = getattr(return_tensors, "value", return_tensors)
    if kind not in (None, "pt", "np", "numpy"):
        raise QwenConfigError(f"return_tensors={return_tensors!r} is not supported (use 'pt'/'np')")


def _batch(
    pixel_values: torch.Tensor, grid: torch.Tensor, return_tensors: Any, mode: str
) -> Mapping[str, Any]:
    kind = getattr(return_tensors, "value", return_tensors)
    # transformers' PIL processor keeps numpy arrays unless asked for tensors; the
    # torchvision one keeps torch tensors unless asked for numpy.
    as_numpy = kind in ("np", "numpy") or (kind is None and mode == PIL)
    if as_numpy:
        data: dict[str, Any] = {
            "pixel_values": pixel_values.numpy(),
            "image_grid_thw": grid.numpy(),
        }
    else:
        data = {"pixel_values": pixel_values, "image_grid_thw": grid}
    cls = batch_feature_cls()
    return data if cls is None else cls(data=data, tensor_type=None)
