"""Deferred Kimi preprocessing: ``prepare`` on the sender, ``run`` on the vision owner.

``eager`` is the reference path (what the tokenizer process would do without deferral);
``prepare`` picks each item's transport form (:mod:`.transport`) and builds a picklable
:class:`DeferredPayload`; ``run`` turns a payload into the same ``pixel_values`` and
``grid_thws`` on the owner's device. Two pixel recipes, chosen with ``recipe=``:

``recipe="k25"`` (the default): Kimi K2.5/K2.6's checkpoint processor, **Pillow-exact**.
``convert("RGB")`` (alpha dropped), Pillow bicubic resize of uint8, pad, normalize (the
checkpoint's float ops as a lookup table), patchify. ``eager`` is :class:`FusedKimiProcessor`;
the owner's backends:

- ``resize_backend="pillow"`` (the default on CPU): the fused Pillow processor on the host:
  identical to ``eager`` (``torch.equal``) by construction.
- ``"torch-pillow"`` (the default elsewhere): uint8 to the device, a bit-exact torch port of
  Pillow's bicubic (:func:`.resize.pillow_resize`) with same-shape frames batched into one
  call, then pad + LUT normalize + patchify on the device: equal to ``eager``.
- ``"torch-antialias"``: as above with ``interpolate(bicubic, antialias=True)`` + round/clamp
  (within one level of Pillow, not equal).

With a background fill configured, the K2.5 recipe composites the full-size image
(:func:`.background.fill_transparent_bg`) *before* its Pillow resize: a K2.5-style
approximation of K3 kept for compatibility; it is not the release's K3 arithmetic for images
with transparency.

``recipe="k3"``: Kimi K3 as the release computes it (SGLang 0.5.17+, :mod:`.k3`), **not**
Pillow: K3 staging (alpha kept, not premultiplied), ``interpolate(bicubic, antialias=True)`` of
all channels in float32 + round/clamp, the background fill *after* the resize, then pad +
``addcmul`` normalize in float32 + patchify. ``eager`` and ``run`` (any device; the
``resize_backend`` must be ``"auto"`` or ``"torch-antialias"``) run the same ops; on the CPU
they equal the release's functions (``torch.equal``). Images only: the release defines no
video arithmetic for K3.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..config import KimiMediaConfig
from ..errors import DeferredPayloadError, KimiConfigError, KimiInputError
from ..navit_resize import plan_image, plan_video_chunk
from ..processor import FusedKimiProcessor, _frames_of
from .background import BackgroundConfig, fill_transparent_bg
from .k3 import k3_frames, k3_normalization, k3_stage
from .resize import pillow_resize, torch_antialias_resize
from .transport import (
    PAYLOAD_VERSION,
    DeferredMedia,
    DeferredPayload,
    FramePayload,
    TransportDecision,
    TransportForm,
    check_frame_pixels,
    check_recipe,
    decide_media,
    decode_frame,
    decode_fully,
    decoder_fingerprint,
    inspect_frame,
    to_chw_uint8,
)

RESIZE_BACKENDS = ("auto", "pillow", "torch-pillow", "torch-antialias")
K3_RESIZE_BACKENDS = ("auto", "torch-antialias")
EagerFn = Callable[[list[Mapping[str, Any]]], torch.Tensor]


def _hwc(chw: torch.Tensor) -> np.ndarray:
    array = chw.numpy()
    return array[0] if array.shape[0] == 1 else np.ascontiguousarray(array.transpose(1, 2, 0))


class DeferredKimiProcessor:
    """Sender and owner halves of deferred preprocessing for Kimi K2.5/K2.6 and K3.

    ``recipe``: ``"k25"`` (default, Pillow-exact K2.5/K2.6) or ``"k3"`` (the K3 release's
    torch arithmetic, see the module docstring). ``background``: ``None``/``"drop"`` drops
    alpha (K2.5's ``convert("RGB")``; K3 with ``transparent_bg_config: null``), or a K3 fill
    (``"white"``, ``"black"``, ``"gray"``, ``"chessboard"``, the checkpoint's
    ``transparent_bg_config`` dict, see :class:`BackgroundConfig`). ``allow_encoded=False``
    never ships encoded bytes (for an owner whose Pillow build differs). ``eager_fn``
    replaces the eager processor for items preprocessed eagerly (for example one that
    accepts float tensors); it maps a list of one media dict to float32 ``pixel_values``.
    """

    def __init__(
        self,
        media_proc_cfg: Mapping[str, Any] | KimiMediaConfig,
        background: BackgroundConfig | Mapping[str, Any] | str | None = None,
        *,
        allow_encoded: bool = True,
        eager_fn: EagerFn | None = None,
        recipe: str = "k25",
    ) -> None:
        self.recipe = check_recipe(recipe)
        self.fused = FusedKimiProcessor(media_proc_cfg)
        self.config = self.fused.config
        self.background = BackgroundConfig.from_config(background)
        self.allow_encoded = allow_encoded
        self._eager_fn = eager_fn
        self._luts: dict[str, torch.Tensor] = {}
        self._k3_norm: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- eager (reference) ---------------------------------------------------------------------
    def _filled(self, frame: Any) -> Any:
        """A frame as the eager path feeds it to the fused processor (K3: alpha resolved)."""
        if not self.background.needs_alpha:
            return frame
        info = inspect_frame(frame, self.background)
        if info.raw_channels != 4:
            return frame
        chw = to_chw_uint8(frame, self.background)
        assert chw is not None
        return _hwc(fill_transparent_bg(chw, self.background))

    def eager(self, medias: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> Mapping[str, Any]:
        """The eager path: ``pixel_values`` and ``grid_thws`` computed here, on the CPU."""
        if isinstance(medias, Mapping):
            medias = [medias]
        if self.recipe == "k3":
            return self._eager_k3(medias)
        if not self.background.needs_alpha:
            return self.fused.preprocess(medias)
        converted = []
        for media in medias:
            kind, frames = _frames_of(media)
            filled = [self._filled(frame) for frame in frames]
            if kind == "image":
                converted.append({"type": "image", "image": filled[0]})
            else:
                converted.append({"type": "video_chunk", "video_chunk": filled})
        return self.fused.preprocess(converted)

    def _eager_k3(self, medias: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """K3's arithmetic on the CPU: stage each image, then the owner's K3 ops."""
        if not isinstance(medias, Sequence) or isinstance(medias, (str, bytes)):
            raise KimiInputError(f"medias must be a list of dicts, got {type(medias).__name__}")
        entries: list[tuple[torch.Tensor, int, Any]] = []
        grids = []
        offset = 0
        for media in medias:
            _, frames, plan, _ = self._inspect(media)
            chw = to_chw_uint8(frames[0], self.background, recipe="k3")
            if chw is None:
                raise KimiInputError(
                    "Kimi K3 preprocessing takes uint8 pixels (PIL images, encoded bytes, "
                    "uint8 arrays/tensors); got a non-uint8 array or tensor"
                )
            entries.append((chw, offset, plan))
            grids.append(plan.grid_thw)
            offset += plan.num_patches
        p = self.config.patch_size
        out = torch.empty((offset, 3, p, p), dtype=torch.float32)
        self._run_k3_frames(entries, out, torch.device("cpu"))
        grid_thws = torch.tensor(grids, dtype=torch.int64).reshape(len(grids), 3)
        return {"pixel_values": out, "grid_thws": grid_thws}

    def _eager_pixels(self, media: Mapping[str, Any]) -> torch.Tensor:
        if self._eager_fn is not None:
            return self._eager_fn([media])
        return self.eager([media])["pixel_values"]

    # -- sender --------------------------------------------------------------------------------
    def _inspect(self, media: Mapping[str, Any]) -> tuple[str, list[Any], Any, list[Any]]:
        kind, frames = _frames_of(media)
        if self.recipe == "k3" and kind != "image":
            raise KimiInputError(
                f"the Kimi K3 recipe takes images only (the release defines no {kind!r} "
                "arithmetic)"
            )
        plan = self.fused.plan(media)
        infos = [inspect_frame(frame, self.background, self.recipe) for frame in frames]
        if not self.allow_encoded:
            infos = [replace(info, encoded=None, format=None) for info in infos]
        return kind, frames, plan, infos

    def decide(self, media: Mapping[str, Any]) -> TransportDecision:
        """The transport decision for one media item (no pixel work beyond headers)."""
        _, _, plan, infos = self._inspect(media)
        return decide_media(infos, plan)

    def prepare(self, medias: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> DeferredPayload:
        """Sender side: choose each item's form and build the payload for the owner."""
        if isinstance(medias, Mapping):
            medias = [medias]
        if not isinstance(medias, Sequence) or isinstance(medias, (str, bytes)):
            raise KimiInputError(f"medias must be a list of dicts, got {type(medias).__name__}")
        out: list[DeferredMedia] = []
        for media in medias:
            kind, frames, plan, infos = self._inspect(media)
            decision = decide_media(infos, plan)
            item = DeferredMedia(kind, plan, decision)
            if not decision.deferred:
                pixels = self._eager_pixels(media)
                expected = (plan.num_patches, 3, plan.patch_size, plan.patch_size)
                if tuple(pixels.shape) != expected or pixels.dtype != torch.float32:
                    raise KimiInputError(
                        f"eager pixel_values must be float32 {expected}, got "
                        f"{pixels.dtype} {tuple(pixels.shape)}"
                    )
                item.pixel_values = pixels.contiguous()
            else:
                for frame, info, form in zip(frames, infos, decision.frame_forms, strict=True):
                    size = {"width": info.width, "height": info.height}
                    if form is TransportForm.ENCODED:
                        assert info.encoded is not None and info.raw_channels is not None
                        decode_fully(info.encoded)  # a corrupt file fails here, not on the owner
                        item.frames.append(FramePayload(
                            form, info.encoded, channels=info.raw_channels, mode=info.mode, **size
                        ))
                    else:
                        chw = to_chw_uint8(frame, self.background, recipe=self.recipe)
                        assert chw is not None and chw.shape[0] == info.raw_channels
                        item.frames.append(FramePayload(
                            TransportForm.RAW, chw, channels=int(chw.shape[0]), **size
                        ))
            out.append(item)
        return DeferredPayload(
            medias=out,
            config=self.config.to_dict(),
            background=self.background.to_dict(),
            decoder=decoder_fingerprint(),
            recipe=self.recipe,
        )

    # -- owner ---------------------------------------------------------------------------------
    def _check(self, payload: Any) -> DeferredPayload:
        if not isinstance(payload, DeferredPayload):
            raise DeferredPayloadError(
                f"expected a DeferredPayload, got {type(payload).__name__}"
            )
        if payload.version != PAYLOAD_VERSION:
            raise DeferredPayloadError(
                f"payload format version {payload.version}, this owner reads {PAYLOAD_VERSION}"
            )
        if payload.config != self.config.to_dict():
            raise DeferredPayloadError(
                "payload was planned under a different media_proc_cfg: "
                f"{payload.config} != {self.config.to_dict()}"
            )
        recipe = getattr(payload, "recipe", "k25")
        if recipe != self.recipe:
            raise DeferredPayloadError(
                f"payload was prepared for the {recipe!r} pixel recipe, this owner runs "
                f"{self.recipe!r}"
            )
        if payload.background != self.background.to_dict():
            raise DeferredPayloadError(
                f"payload background {payload.background} != owner's "
                f"{self.background.to_dict()}"
            )
        encoded = any(
            frame.form is TransportForm.ENCODED for m in payload.medias for frame in m.frames
        )
        if encoded and tuple(payload.decoder) != decoder_fingerprint():
            raise DeferredPayloadError(
                "encoded frames were sent by a process with another decoder build "
                f"({payload.decoder}) than this owner's ({decoder_fingerprint()}); pixels "
                "could differ. Build the sender with allow_encoded=False."
            )
        for media in payload.medias:
            if media.decision.deferred:
                expected = media.plan.num_frames
                if len(media.frames) != expected:
                    raise DeferredPayloadError(
                        f"media has {len(media.frames)} frames, its plan says {expected}"
                    )
                self._check_plan(media)
            else:
                self._check_eager(media)
        return payload

    def _check_eager(self, media: DeferredMedia) -> None:
        """Eager ``pixel_values`` must be exactly what the plan describes: float32
        ``[num_patches, 3, p, p]`` with real data. Copying them into the output would
        otherwise broadcast a single patch over every row or cast other dtypes silently."""
        pixels = media.pixel_values
        if pixels is None:
            raise DeferredPayloadError("eager media carries no pixel_values")
        if not isinstance(pixels, torch.Tensor):
            raise DeferredPayloadError(
                f"eager pixel_values must be a torch tensor, got {type(pixels).__name__}"
            )
        plan = media.plan
        p = self.config.patch_size
        expected = (plan.num_patches, 3, p, p)
        got = tuple(int(v) for v in pixels.shape)
        if plan.patch_size != p or got != expected:
            raise DeferredPayloadError(
                f"eager pixel_values of shape {got} do not match their {media.kind} plan "
                f"{plan.grid_thw}: expected {expected} ({plan.num_patches} patch rows of "
                f"3x{p}x{p}); refusing to broadcast or reshape them"
            )
        if pixels.dtype != torch.float32:
            raise DeferredPayloadError(
                f"eager pixel_values must be float32, got {pixels.dtype}; refusing to cast"
            )
        if pixels.device.type == "meta" or pixels.layout != torch.strided:
            raise DeferredPayloadError(
                f"eager pixel_values hold no readable data ({pixels.device.type} device, "
                f"{pixels.layout})"
            )

    def _check_plan(self, media: DeferredMedia) -> None:
        """The plan must be the one this owner computes from the frames' recorded size."""
        first = media.frames[0]
        if first.width <= 0 or first.height <= 0:
            raise DeferredPayloadError("deferred frames carry no source size to check against")
        if media.kind == "image":
            plan = plan_image(self.config, first.width, first.height)
        else:
            plan = plan_video_chunk(self.config, first.width, first.height, len(media.frames))
        if plan != media.plan:
            raise KimiInputError(
                f"{media.kind} plan {media.plan.grid_thw} does not match its "
                f"{first.width}x{first.height} frame (planned here: {plan.grid_thw})"
            )

    def run(
        self,
        payload: DeferredPayload,
        device: torch.device | str = "cpu",
        resize_backend: str = "auto",
    ) -> dict[str, torch.Tensor]:
        """Owner side: ``pixel_values`` (float32, on ``device``) and ``grid_thws`` (CPU)."""
        payload = self._check(payload)
        device = torch.device(device)
        if resize_backend not in RESIZE_BACKENDS:
            raise KimiConfigError(
                f"resize_backend must be one of {RESIZE_BACKENDS}, got {resize_backend!r}"
            )
        if self.recipe == "k3":
            if resize_backend not in K3_RESIZE_BACKENDS:
                raise KimiConfigError(
                    f"the K3 recipe resizes with the release's torch antialias bicubic: "
                    f"resize_backend must be one of {K3_RESIZE_BACKENDS}, got {resize_backend!r}"
                )
            return self._run_k3(payload, device)
        if resize_backend == "auto":
            resize_backend = "pillow" if device.type == "cpu" else "torch-pillow"
        p = self.config.patch_size
        total = sum(media.plan.num_patches for media in payload.medias)
        grid_thws = payload.grid_thws
        if resize_backend == "pillow":
            pixel_values = self._run_pillow(payload, total, p)
            return {"pixel_values": pixel_values.to(device), "grid_thws": grid_thws}
        pixel_values = torch.empty((total, 3, p, p), dtype=torch.float32, device=device)
        self._run_device(payload, pixel_values, device, resize_backend)
        return {"pixel_values": pixel_values, "grid_thws": grid_thws}

    def _host_frame(self, frame: FramePayload) -> torch.Tensor:
        chw = decode_frame(frame, self.background, self.recipe)
        if chw.dtype != torch.uint8 or chw.dim() != 3 or chw.shape[0] not in (1, 3, 4):
            raise DeferredPayloadError(
                f"raw frames must be uint8 [C, H, W] with C in 1/3/4, got {chw.dtype} "
                f"{tuple(chw.shape)}"
            )
        if frame.form is TransportForm.RAW:
            check_frame_pixels(frame, chw)
        return chw

    def _run_pillow(self, payload: DeferredPayload, total: int, p: int) -> torch.Tensor:
        deferred: list[dict[str, Any]] = []
        for media in payload.medias:
            if not media.decision.deferred:
                continue
            frames = []
            for frame in media.frames:
                chw = self._host_frame(frame)
                if chw.shape[0] == 4:
                    chw = fill_transparent_bg(chw, self.background)
                frames.append(_hwc(chw))
            if media.kind == "image":
                deferred.append({"type": "image", "image": frames[0]})
            else:
                deferred.append({"type": "video_chunk", "video_chunk": frames})
        done = self.fused.preprocess(deferred)["pixel_values"] if deferred else None
        out = torch.empty((total, 3, p, p), dtype=torch.float32)
        offset = source = 0
        for media in payload.medias:
            n = media.plan.num_patches
            if media.decision.deferred:
                assert done is not None
                out[offset : offset + n] = done[source : source + n]
                source += n
            else:
                assert media.pixel_values is not None
                out[offset : offset + n] = media.pixel_values
            offset += n
        return out

    # -- K3 recipe -----------------------------------------------------------------------------
    def _run_k3(self, payload: DeferredPayload, device: torch.device) -> dict[str, torch.Tensor]:
        p = self.config.patch_size
        total = sum(media.plan.num_patches for media in payload.medias)
        out = torch.empty((total, 3, p, p), dtype=torch.float32, device=device)
        entries: list[tuple[torch.Tensor, int, Any]] = []
        offset = 0
        for media in payload.medias:
            plan = media.plan
            if not media.decision.deferred:
                assert media.pixel_values is not None
                out[offset : offset + plan.num_patches] = media.pixel_values.to(device)
            else:
                entries.append((self._host_frame(media.frames[0]), offset, plan))
            offset += plan.num_patches
        self._run_k3_frames(entries, out, device)
        return {"pixel_values": out, "grid_thws": payload.grid_thws}

    def _run_k3_frames(
        self, entries: list[tuple[torch.Tensor, int, Any]], out: torch.Tensor,
        device: torch.device,
    ) -> None:
        """Stage + K3 ops for raw uint8 frames; writes each at its patch offset in ``out``."""
        key = str(device)
        if key not in self._k3_norm:
            self._k3_norm[key] = k3_normalization(self.config.image_mean, self.config.image_std,
                                                  device)
        scale, bias = self._k3_norm[key]
        groups: dict[tuple[int, ...], list[tuple[torch.Tensor, int, Any]]] = {}
        for chw, start, plan in entries:
            if device.type == "cuda":
                chw = chw.pin_memory().to(device, non_blocking=True)
            else:
                chw = chw.to(device)
            staged = k3_stage(chw)
            key_shape = (*staged.shape, plan.new_height, plan.new_width, plan.padded_height,
                         plan.padded_width)
            groups.setdefault(key_shape, []).append((staged, start, plan))
        for members in groups.values():  # one resize call per source shape and target
            plan = members[0][2]
            batch = torch.stack([m[0] for m in members])
            patches = k3_frames(batch, plan, self.background, scale, bias)
            for i, (_, start, _) in enumerate(members):
                out[start : start + plan.patches_per_frame] = patches[i]

    def _lut(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        if key not in self._luts:
            self._luts[key] = torch.from_numpy(self.fused.normalize_lut).to(device)
        return self._luts[key]

    def _run_device(
        self, payload: DeferredPayload, out: torch.Tensor, device: torch.device, backend: str
    ) -> None:
        resize = pillow_resize if backend == "torch-pillow" else torch_antialias_resize
        groups: dict[tuple[int, int, int, int], list[tuple[torch.Tensor, int, Any]]] = {}
        offset = 0
        for media in payload.medias:
            plan = media.plan
            if not media.decision.deferred:
                assert media.pixel_values is not None
                out[offset : offset + plan.num_patches] = media.pixel_values.to(device)
                offset += plan.num_patches
                continue
            for frame in media.frames:
                chw = self._host_frame(frame)
                if device.type == "cuda":
                    chw = chw.pin_memory().to(device, non_blocking=True)
                else:
                    chw = chw.to(device)
                rgb = fill_transparent_bg(chw, self.background)
                key = (rgb.shape[1], rgb.shape[2], plan.new_height, plan.new_width)
                groups.setdefault(key, []).append((rgb, offset, plan))
                offset += plan.patches_per_frame
        lut = self._lut(device)
        for (_, _, new_h, new_w), members in groups.items():
            batch = torch.stack([m[0] for m in members])  # one resize call per shape
            resized = resize(batch, new_w, new_h)
            plan = members[0][2]
            patches = self._pad_normalize_patchify(resized, plan, lut)
            for i, (_, start, _) in enumerate(members):
                out[start : start + plan.patches_per_frame] = patches[i]

    @staticmethod
    def _pad_normalize_patchify(frames: torch.Tensor, plan: Any, lut: torch.Tensor) -> torch.Tensor:
        """uint8 ``[B, 3, h, w]`` -> float32 ``[B, grid_h * grid_w, 3, p, p]``."""
        b = frames.shape[0]
        p = plan.patch_size
        canvas = torch.zeros(
            (b, 3, plan.padded_height, plan.padded_width), dtype=torch.uint8, device=frames.device
        )
        canvas[:, :, : plan.new_height, : plan.new_width] = frames
        idx = canvas.long()
        normalized = torch.empty(canvas.shape, dtype=torch.float32, device=frames.device)
        for c in range(3):
            normalized[:, c] = lut[c][idx[:, c]]
        x = normalized.reshape(b, 3, plan.grid_h, p, plan.grid_w, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, plan.grid_h * plan.grid_w, 3, p, p)
