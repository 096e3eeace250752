"""Real-content media for the serving A/B: photograph JPEGs and camera-pan video clips.

``vllm bench serve``'s random-mm dataset sends noise images; decoding noise is not what a
photo costs (JPEG entropy decoding scales with detail), and it sends no video. This module
writes ShareGPT-format datasets (one image or one video per request) that ``vllm bench serve
--dataset-name sharegpt`` replays:

- photos: scikit-image's photographs, a different crop and mirror per request, resized
  (bicubic) to the workload's size and saved as JPEG q92, sent as base64 data URLs (the
  bytes the server decodes are these bytes);
- videos: a camera pan over those photographs, a different start per request, encoded to
  MPEG-4 with OpenCV (the serving environment's cv2; the core environment has no cv2) and
  sent as ``file://`` URLs under ``--allowed-local-media-path``; vLLM decodes them with its
  own video loader.

Every request gets content of its own, so vLLM's multimodal processor cache never hits and
every request pays its preprocessing. Files are cached under ``.cache/serving/media``.

    python -m benchmarks.serving.media encode FRAMES.npy OUT.mp4 FPS   # serving env (cv2)
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

PROMPT = "Describe what this shows in one short sentence, please."
VERSION = "1"  # bump to rebuild every cached dataset


def _photographs() -> list[np.ndarray]:
    from skimage import data  # core environment (benchmarks extra)

    return [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]


def photo_frame(index: int, width: int, height: int) -> np.ndarray:
    """Photograph ``index % 4``, cropped by ``index`` (a different crop each request),
    mirrored on odd rounds, resized to ``width`` x ``height`` (RGB uint8)."""
    photos = _photographs()
    photo = photos[index % len(photos)]
    round_ = index // len(photos)
    h, w = photo.shape[:2]
    dy, dx = (3 * round_) % max(1, h // 8), (5 * round_) % max(1, w // 8)
    crop = photo[dy:h - (h // 8 - dy), dx:w - (w // 8 - dx)]
    if round_ % 2:
        crop = crop[:, ::-1]
    return np.asarray(Image.fromarray(np.ascontiguousarray(crop)).resize(
        (width, height), Image.BICUBIC))


def photo_jpeg(index: int, width: int, height: int, quality: int = 92) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo_frame(index, width, height)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def pan_clip(index: int, frames: int, width: int, height: int) -> np.ndarray:
    """``frames`` frames (T x H x W x 3 uint8) panning across the photographs side by side,
    starting ``index`` steps further than clip 0."""
    photos = _photographs()
    order = photos[index % len(photos):] + photos[:index % len(photos)]
    strip = np.concatenate(
        [np.asarray(Image.fromarray(p).resize((width, height), Image.BICUBIC)) for p in order],
        axis=1,
    )
    step = max(1, (strip.shape[1] - width) // max(1, frames - 1 + index % 7))
    start = (index % 7) * step
    return np.stack([strip[:, start + k * step:start + k * step + width]
                     for k in range(frames)])


def _entry(key: str, url: str) -> dict:
    return {"conversations": [{"from": "human", "value": PROMPT},
                              {"from": "gpt", "value": "A picture."}], key: url}


def photo_dataset(cache: Path, name: str, count: int, width: int, height: int,
                  first: int) -> Path:
    """A ShareGPT dataset of ``count`` distinct photo JPEGs (indices ``first``...)."""
    path = cache / "media" / f"photos-{name}-{width}x{height}-{first}-{count}-v{VERSION}.json"
    if path.exists():
        return path
    entries = []
    for i in range(first, first + count):
        data = base64.b64encode(photo_jpeg(i, width, height)).decode()
        entries.append(_entry("image", f"data:image/jpeg;base64,{data}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries))
    return path


def video_dataset(cache: Path, serving_python: Path, name: str, count: int, frames: int,
                  width: int, height: int, first: int, fps: float = 10.0) -> Path:
    """A ShareGPT dataset of ``count`` distinct MPEG-4 clips (``file://`` URLs)."""
    folder = cache / "media"
    path = folder / f"videos-{name}-{frames}x{width}x{height}-{first}-{count}-v{VERSION}.json"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i in range(first, first + count):
        clip_path = folder / f"clip-{frames}x{width}x{height}-{i}-v{VERSION}.mp4"
        if not clip_path.exists():
            raw = folder / f"clip-{i}.npy"
            np.save(raw, pan_clip(i, frames, width, height))
            try:
                subprocess.run([str(serving_python), "-m", "benchmarks.serving.media", "encode",
                                str(raw), str(clip_path), str(fps)],
                               check=True, cwd=Path(__file__).resolve().parents[2])
            finally:
                raw.unlink(missing_ok=True)
        entries.append(_entry("video", clip_path.resolve().as_uri()))
    path.write_text(json.dumps(entries))
    return path


def encode(frames_path: Path, out: Path, fps: float) -> None:
    """Write the RGB frames in ``frames_path`` to ``out`` as MPEG-4 (OpenCV's ``mp4v``)."""
    import cv2  # serving environment only

    frames = np.load(frames_path)
    height, width = frames.shape[1:3]
    tmp = out.with_suffix(".part.mp4")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write MPEG-4 to {tmp}")
    try:
        for frame in frames:
            writer.write(np.ascontiguousarray(frame[..., ::-1]))  # OpenCV takes BGR
    finally:
        writer.release()
    check = cv2.VideoCapture(str(tmp))
    got = int(check.get(cv2.CAP_PROP_FRAME_COUNT))
    check.release()
    if got != len(frames):
        raise RuntimeError(f"{tmp}: OpenCV reads {got} frames back, wrote {len(frames)}")
    tmp.replace(out)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "encode":
        encode(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
