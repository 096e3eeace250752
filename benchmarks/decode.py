"""Decoding: vlm_fastpath.imaging.decode against Pillow, alone and from bytes to pixel_values.

1. Decode alone, per format and size (1024², 2048², 4032x3024): ``decode_bytes`` (the layer
   the patches use: Pillow opens, a verified codec library decodes) against Pillow's
   ``Image.open`` + ``load``. Targets (issue #30), each the median over the three sizes:
   JPEG >= 1.2x, PNG >= 1.3x, WebP >= 1.3x. Extra JPEG rows with restart markers every MCU
   row (as some camera encoders write them; decoded in parts on the resize pool,
   ``decode.jpeg_parts``), a 2048x1536 screen-sized JPEG (Kimi keeps its size) and a photo
   are shown beside them and are not in the target's medians.
2. Bytes to pixel_values: vLLM's own ``ImageMediaIO.load_bytes`` with the patch
   ``vllm-fast-image-decode`` applied and reverted (when vLLM imports here; else the same
   steps spelled out: open, EXIF transpose, load, RGB), feeding our ``FusedKimiProcessor``
   (Kimi K2.5) and ``FastQwen2VLImageProcessor`` (Qwen2.5-VL, from transformers'
   torchvision processor), each offered to the decode layer as vLLM's patches offer it, so
   a large JPEG, PNG or WebP is resized and patchified strip by strip while it decodes
   (``imaging.decode.speculation``). Both schedules of ``benchmarks.schedules``, with each side's
   minor page faults per call: with the sides interleaved, the baseline's Pillow image
   (48 MB at 4032x3024, in 16 MB blocks) comes from reused heap memory or from fresh pages
   depending on glibc's heap state, which the other side's allocations change (measured: 32
   against 73 ms for the same Pillow load, 0 against 23.4k faults).
3. The overlap alone: ours with ``VLM_FASTPATH_DECODE_OVERLAP`` on and off, calls interleaved
   in one process, for every image of 2 MP and up (but restart-marked JPEGs: decoded in
   parts, they start nothing either way).
4. Decode beside a CPU-bound Python thread (as in an API server whose event loop is busy with
   other requests), 2048² and the photo: Pillow's ``ImageFile.load`` feeds its decoder 64 KB
   at a time from Python and takes the GIL back for each block; with another thread running
   Python each takeback waits up to the switch interval (5 ms). A codec library decodes in
   one call: one release, one takeback. No target; it shows what a busy server sees.
Same process, calls of the two sides alternated, medians; every row checks exactness (pixels
equal; ``torch.equal`` on pixel_values). ``first ms`` is the first call of ours (library import
included). Every verified row is timed (``VLM_FASTPATH_FAST_DECODE=all``). "ours" is the image
as the engine gets it (``decoded_image``: the decoder's array, Pillow's store unfilled);
"filled" adds filling Pillow's store, what a consumer other than vlm-fastpath's processors and
numpy pays.
Run: ``python -m benchmarks.decode [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import io
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from benchmarks.decode_libraries import encode, noisy_photo, photo_like, screenshot_like
from benchmarks.schedules import SCHEDULES, busy_python_thread, timed_calls
from vlm_fastpath.bench.checkpoints import KIMI_K25_MEDIA_CFG, QWEN25_VL_CFG
from vlm_fastpath.imaging import decode
from vlm_fastpath.imaging.decode import speculation

SIZES = ((1024, 1024), (2048, 2048), (4032, 3024))
TARGETS = {"jpeg": 1.2, "png": 1.3, "webp": 1.3}
# The loader-plus-processor targets (issue #30): format, size label, minimum speed-up.
PIPELINE_TARGETS = (("jpeg", "4032x3024 photo", 1.35), ("png", "2048x2048", 1.3))


def pillow_decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def filled(image: Image.Image) -> Image.Image:
    """The image with Pillow's own pixel store filled (what a consumer that is not
    vlm-fastpath's processors or numpy pays for: ``decoded_image``)."""
    image.im  # noqa: B018 - the property fills the store
    return image


def paired(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, calls alternated so load noise hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta), statistics.median(tb)


def contended_rows(items: list[tuple[str, str, bytes]], repeats: int) -> list[dict]:
    """Decode alone beside ``busy_python_thread``: the 2048² rows and the photo."""
    rows = []
    for fmt, label, data in items:
        if label not in ("2048x2048", "4032x3024 photo"):
            continue
        with busy_python_thread():
            t_ours, t_pil = paired(lambda d=data: decode.decode_bytes(d),
                                   lambda d=data: pillow_decode(d), repeats)
        rows.append(dict(fmt=fmt, size=label, pillow_ms=t_pil * 1e3, ours_ms=t_ours * 1e3,
                         speedup=t_pil / t_ours))
    return rows


def inputs(quick: bool) -> list[tuple[str, str, bytes]]:
    """(format, label, bytes): photo-like JPEG q90 / PNG / WebP q80 per size, and a photo."""
    sizes = SIZES[:1] if quick else SIZES
    out = []
    for i, (w, h) in enumerate(sizes):
        rgb = photo_like(w, h, 100 + i)
        label = f"{w}x{h}"
        out.append(("jpeg", label, encode(rgb, "JPEG", quality=90)))
        out.append(("png", label, encode(rgb, "PNG")))
        out.append(("webp", label, encode(rgb, "WEBP", quality=80)))
        if w >= 2048:  # restart markers every MCU row, as some cameras write (decoded in parts)
            out.append(("jpeg", f"{label} restart markers",
                        encode(rgb, "JPEG", quality=90, restart_marker_rows=1)))
    if not quick:
        # a screen-sized image, 3.1 MP: Kimi keeps its size (only pads and patchifies), Qwen
        # resizes it; not in the targets' medians
        out.append(("jpeg", "2048x1536 screen", encode(photo_like(2048, 1536, 99), "JPEG",
                                                       quality=90)))
        try:
            from skimage import data as skdata

            photo = Image.fromarray(skdata.chelsea()).resize((4032, 3024),
                                                            Image.Resampling.LANCZOS)
            out.append(("jpeg", "4032x3024 photo", encode(np.asarray(photo), "JPEG",
                                                          quality=92)))
            out.append(("jpeg", "4032x3024 photo, restart markers",
                        encode(np.asarray(photo), "JPEG", quality=92, restart_marker_rows=1)))
        except ImportError:
            pass
        # issue #51: PNG where it loses -- camera-noisy photos and screen captures
        for w, h in ((2048, 2048), (4032, 3024)):
            out.append(("png", f"{w}x{h} noisy photo", encode(noisy_photo(w, h, 51), "PNG")))
        for w, h in ((1920, 1080), (2560, 1440)):
            out.append(("png", f"{w}x{h} screenshot",
                        encode(screenshot_like(w, h, 51), "PNG")))
    return out


def decode_rows(items: list[tuple[str, str, bytes]], repeats: int) -> list[dict]:
    rows = []
    for fmt, label, data in items:
        t0 = time.perf_counter()
        ours = decode.decode_bytes(data)
        first = time.perf_counter() - t0
        exact = ours.tobytes() == pillow_decode(data).tobytes()
        exact = exact and Image.Image.tobytes(ours) == pillow_decode(data).tobytes()
        t_ours, t_pil = paired(lambda d=data: decode.decode_bytes(d),
                               lambda d=data: pillow_decode(d), repeats)
        t_filled, t_pil2 = paired(lambda d=data: filled(decode.decode_bytes(d)),
                                  lambda d=data: pillow_decode(d), repeats)
        rows.append(dict(fmt=fmt, size=label, mb=len(data) / 1e6, pillow_ms=t_pil * 1e3,
                         ours_ms=t_ours * 1e3, first_ms=first * 1e3, speedup=t_pil / t_ours,
                         filled_ms=t_filled * 1e3, filled_speedup=t_pil2 / t_filled,
                         exact=exact))
    return rows


@functools.cache  # once: a loader switches the patched global, so a second look would miss it
def _loaders() -> tuple[str, Callable[[bytes], Image.Image], Callable[[bytes], Image.Image]]:
    """(name, ours, theirs): bytes -> the RGB image the engine's loader hands on."""
    try:
        import vllm.multimodal.media.image as media

        import vlm_fastpath

        patch = "vllm-fast-image-decode"
        vlm_fastpath.apply("vllm", [patch])
        status = next(r for r in vlm_fastpath.status("vllm") if r["name"] == patch)
        if status["status"] != "applied":
            raise ImportError(status["reason"])
        fast_normalize = media.normalize_image
        own_normalize = fast_normalize.__vlm_fastpath_original__
        io_obj = media.ImageMediaIO()

        def load_with(normalize: Any) -> Callable[[bytes], Image.Image]:
            def load(data: bytes) -> Image.Image:
                media.normalize_image = normalize  # one thread: switch the patched global
                return io_obj.load_bytes(data).media
            return load

        return ("vLLM ImageMediaIO.load_bytes", load_with(fast_normalize),
                load_with(own_normalize))
    except ImportError:
        def steps(open_and_load: Callable[[bytes], Image.Image]) -> Callable[[bytes], Any]:
            return lambda data: ImageOps.exif_transpose(open_and_load(data)).convert("RGB")

        return ("open+exif_transpose+load+RGB", steps(decode.decode_bytes),
                steps(pillow_decode))


def _processors() -> tuple[dict[str, Callable[[Image.Image], Any]], dict[str, Any]]:
    """(model -> image -> pixel_values, model -> the processor the decode layer is offered)."""
    from transformers import Qwen2VLImageProcessor

    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    kimi = FusedKimiProcessor(KIMI_K25_MEDIA_CFG)
    hf_args = {k: v for k, v in QWEN25_VL_CFG.items()
               if k not in ("image_processor_type", "processor_class")}
    qwen = FastQwen2VLImageProcessor.from_hf(Qwen2VLImageProcessor(**hf_args))
    processors = {
        "kimi": lambda img: kimi.preprocess([{"type": "image", "image": img}])["pixel_values"],
        "qwen": lambda img: qwen(images=[img], return_tensors="pt")["pixel_values"],
    }
    # What vLLM's patches do when they hand a processor out: the decode layer may start it on
    # a large image's rows while they decode (speculation).
    return processors, {"kimi": kimi, "qwen": qwen}


def pipeline_rows(items: list[tuple[str, str, bytes]], repeats: int) -> tuple[str, list[dict]]:
    import torch

    processors, offered = _processors()
    loader_name, ours_load, their_load = _loaders()
    rows = []
    for fmt, label, data in items:
        for model, proc in processors.items():
            speculation.offer(offered[model])
            exact = torch.equal(proc(ours_load(data)), proc(their_load(data)))
            faults: dict[str, list[int]] = {"ours": [], "pillow": []}
            fns = {
                "ours": _counting(lambda d=data, p=proc: p(ours_load(d)), faults["ours"]),
                "pillow": _counting(lambda d=data, p=proc: p(their_load(d)), faults["pillow"]),
            }
            for schedule in SCHEDULES:
                for sink in faults.values():
                    sink.clear()
                times = timed_calls(fns, repeats, schedule)
                t_ours, t_pil = (statistics.median(times[n]) for n in ("ours", "pillow"))
                rows.append(dict(model=model, fmt=fmt, size=label, schedule=schedule,
                                 pillow_ms=t_pil * 1e3, ours_ms=t_ours * 1e3,
                                 speedup=t_pil / t_ours, exact=exact,
                                 pillow_faults=statistics.median(faults["pillow"]),
                                 ours_faults=statistics.median(faults["ours"])))
    return loader_name, rows


def overlap_rows(items: list[tuple[str, str, bytes]], repeats: int) -> list[dict]:
    """Ours (load plus call) with the overlap on and off, calls interleaved in this process:
    what starting the processor on the rows as they decode buys, for each large image."""
    import os

    import torch

    from vlm_fastpath.imaging.decode import layer

    processors, offered = _processors()
    _, ours_load, _ = _loaders()
    rows = []
    for fmt, label, data in items:
        if "restart markers" in label:
            continue  # decoded in parts on the pool: nothing is started either way
        with Image.open(io.BytesIO(data)) as opened:
            if opened.width * opened.height < layer.OVERLAP_PIXELS:
                continue
        for model, proc in processors.items():
            speculation.offer(offered[model])

            def call(switch: str, d: bytes = data, p: Any = proc) -> Any:
                os.environ["VLM_FASTPATH_DECODE_OVERLAP"] = switch
                return p(ours_load(d))

            exact = torch.equal(call("1"), call("0"))
            times = timed_calls({"on": lambda: call("1"), "off": lambda: call("0")}, repeats,
                                "interleaved")
            t_on, t_off = (statistics.median(times[n]) for n in ("on", "off"))
            rows.append(dict(model=model, fmt=fmt, size=label, on_ms=t_on * 1e3,
                             off_ms=t_off * 1e3, speedup=t_off / t_on, exact=exact))
    os.environ.pop("VLM_FASTPATH_DECODE_OVERLAP", None)
    return rows


def _counting(fn: Callable[[], Any], sink: list[int]) -> Callable[[], Any]:
    """``fn``, appending the minor page faults of each call to ``sink``: the pipeline's time
    depends on whether the allocator hands a call fresh pages (glibc's heap state, which the
    other contender's allocations change), so the table shows it."""
    def call() -> Any:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        result = fn()
        sink.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return result
    return call


def png_table(items: list[tuple[str, str, bytes]], repeats: int) -> None:
    """Every PNG row three ways, calls rotated: Pillow, libpng (``png-8bit``, the decoder
    before issue #51) and libdeflate plus our unfilter (``png-deflate``); issue #51's target
    on the noisy photos and screenshots."""
    from vlm_fastpath.imaging.decode import layer

    ours = layer.decoder_for("png-deflate")

    def with_png_deflate(on: bool) -> Callable[[bytes], Image.Image]:
        def run(data: bytes) -> Image.Image:
            layer._DECODERS["png-deflate"] = ours if on else None
            return decode.decode_bytes(data)
        return run

    sides = {"Pillow": pillow_decode, "libpng": with_png_deflate(False),
             "png-deflate": with_png_deflate(True)}
    print("\n## PNG: Pillow, libpng (before #51) and libdeflate + our unfilter (`png-deflate`)\n")
    print("| size | MB | Pillow ms | libpng ms | png-deflate ms | x Pillow | x libpng | exact |")
    print("|---|---|---|---|---|---|---|---|")
    met = []
    for fmt, label, data in items:
        if fmt != "png":
            continue
        want = pillow_decode(data).tobytes()
        exact = all(side(data).tobytes() == want for side in sides.values())
        times: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for k in range(repeats):
            for name in names[k % 3:] + names[:k % 3]:
                t0 = time.perf_counter()
                sides[name](data)
                times[name].append(time.perf_counter() - t0)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        up = ms["Pillow"] / ms["png-deflate"]
        print(f"| {label} | {len(data) / 1e6:.2f} | {ms['Pillow']:.1f} | {ms['libpng']:.1f} | "
              f"{ms['png-deflate']:.1f} | {up:.2f}x | {ms['libpng'] / ms['png-deflate']:.2f}x |"
              f" {exact} |")
        if "noisy" in label or "screenshot" in label:
            met.append((label, up))
    layer._DECODERS["png-deflate"] = ours
    for label, up in met:
        print(f"\n{label}: {up:.2f}x Pillow (target 1.6x: {'met' if up >= 1.6 else 'NOT met'})",
              end="")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import os

    os.environ[decode.ENV_SWITCH] = "all"
    print(f"Pillow {Image.__version__}; fast decoders: {decode.available() or 'none'}"
          + (f" ({decode.unavailable_reason()})" if decode.unavailable_reason() else ""))
    items = inputs(args.quick)

    rows = decode_rows(items, args.repeats)
    print("\n## Decode alone (ours = vlm_fastpath.imaging.decode.decode_bytes)\n")
    print("ours: the decoded image as handed to the engine (its array, Pillow's store unfilled);"
          " filled: the same, then Pillow's store filled (any consumer but ours and numpy)\n")
    print("| format | size | MB | Pillow ms | ours ms | first ms | speed-up | filled ms | "
          "filled speed-up | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['fmt']} | {r['size']} | {r['mb']:.2f} | {r['pillow_ms']:.1f} | "
              f"{r['ours_ms']:.1f} | {r['first_ms']:.1f} | {r['speedup']:.2f}x | "
              f"{r['filled_ms']:.1f} | {r['filled_speedup']:.2f}x | {r['exact']} |")
    plain = {f"{w}x{h}" for w, h in SIZES}  # the target's rows: no photo, no markers
    print("\n| format | median speed-up over sizes | target | met |\n|---|---|---|---|")
    for fmt, target in TARGETS.items():
        ups = [r["speedup"] for r in rows if r["fmt"] == fmt and r["size"] in plain]
        if ups:
            med = statistics.median(ups)
            print(f"| {fmt} | {med:.2f}x | {target}x | {'yes' if med >= target else 'NO'} |")

    png_table(items, args.repeats)

    loader, prows = pipeline_rows(items, max(3, args.repeats // 2))
    print(f"\n## Bytes to pixel_values (loader: {loader}, with vs without fast decoding)\n")
    print("Schedules as in `benchmarks.schedules`; faults: minor page faults per call (median),"
          " i.e. fresh memory the allocator handed the call.\n")
    print("| model | format | size | schedule | loader (Pillow) + processor ms | loader (ours) +"
          " processor ms | speed-up | Pillow faults | ours faults | torch.equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in prows:
        print(f"| {r['model']} | {r['fmt']} | {r['size']} | {r['schedule']} | "
              f"{r['pillow_ms']:.1f} | {r['ours_ms']:.1f} | {r['speedup']:.2f}x | "
              f"{r['pillow_faults']:.0f} | {r['ours_faults']:.0f} | {r['exact']} |")
    print("\n| model | row | schedule | speed-up | target | met |\n|---|---|---|---|---|---|")
    for fmt, size, target in PIPELINE_TARGETS:
        for r in prows:
            if (r["fmt"], r["size"]) == (fmt, size):
                met = "yes" if r["speedup"] >= target else "NO"
                print(f"| {r['model']} | {fmt} {size} | {r['schedule']} | {r['speedup']:.2f}x |"
                      f" {target}x | {met} |")
    orows = overlap_rows(items, args.repeats)
    print("\n## The overlap: ours with and without it (`VLM_FASTPATH_DECODE_OVERLAP`)\n")
    print("Load plus call as above, the two settings' calls interleaved; images of 2 MP and up"
          " (below, nothing is started), but restart-marked JPEGs (decoded in parts: nothing is"
          " started either).\n")
    print("| model | format | size | overlap on ms | off ms | speed-up | torch.equal |\n"
          "|---|---|---|---|---|---|---|")
    for r in orows:
        print(f"| {r['model']} | {r['fmt']} | {r['size']} | {r['on_ms']:.1f} | "
              f"{r['off_ms']:.1f} | {r['speedup']:.2f}x | {r['exact']} |")
    crows = contended_rows(items, max(3, args.repeats // 2))
    print("\n## Decode beside a CPU-bound Python thread (a busy server's event loop)\n")
    print("| format | size | Pillow ms | ours ms | speed-up |\n|---|---|---|---|---|")
    for r in crows:
        print(f"| {r['fmt']} | {r['size']} | {r['pillow_ms']:.1f} | {r['ours_ms']:.1f} | "
              f"{r['speedup']:.2f}x |")
    if not all(r["exact"] for r in rows + prows + orows):
        raise SystemExit("NOT EXACT: a row above differs from Pillow's")


if __name__ == "__main__":
    main()
