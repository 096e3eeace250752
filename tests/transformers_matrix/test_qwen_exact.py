"""The fast parity subset run under every transformers minor of the matrix (ci/transformers/).

Why: transformers changes how images become pixels between minors (5.21 began compositing
transparent images onto white), and the engines allow many minors. Under each, for every
Qwen-VL image processor class it exports: ``check_compatible`` must accept it (5.x's backend
classes) or may stand aside (transformers 4.x's slow/fast classes, which we do not mirror
exactly everywhere), and wherever it accepts, our processor must equal that class on every
PIL mode (transparency included), random sizes, float32 and uint8 output, per-call pixel
limits, Qwen2.5-VL and Qwen3-VL configs. Seconds per version; the rest of the Qwen suite,
which does not depend on the release, runs once (tests/qwen_integration).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

transformers = pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from tests.qwen_integration.helpers import (  # noqa: E402
    CONFIGS,
    assert_same,
    hf_kwargs,
    rand_array,
    rand_image,
    smooth_image,
)
from vlm_fastpath.qwen_integration import (  # noqa: E402
    FastQwen2VLImageProcessor,
    QwenInputError,
    check_compatible,
)
from vlm_fastpath.qwen_integration.rgb_rules import DROP, WHITE  # noqa: E402

UINT8 = {"do_rescale": False, "do_normalize": False}
NAMES = ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorPil", "Qwen2VLImageProcessorFast")


def _classes() -> dict[str, type]:
    """The mirrored classes this transformers exports, each once (5.x aliases ``Fast``)."""
    found: dict[str, type] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in NAMES:
            cls = getattr(transformers, name, None)
            if cls is not None and cls not in found.values():
                found[name] = cls
    return found


CLASSES = _classes()
PAIRS = [(name, config) for name in CLASSES for config in CONFIGS]


def _build(name: str, config: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CLASSES[name](**hf_kwargs(CONFIGS[config]))


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str], str | None]:
    """check_compatible of every (class, config): None (mirrored) or why it stands aside."""
    return {pair: check_compatible(_build(*pair)) for pair in PAIRS}


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{n}-{c}" for n, c in PAIRS])
def pair(request: pytest.FixtureRequest, verdicts) -> tuple[Any, FastQwen2VLImageProcessor]:  # noqa: ANN001
    reason = verdicts[request.param]
    if reason is not None:
        pytest.skip(f"check_compatible stands aside here: {reason}")
    hf = _build(*request.param)
    return hf, FastQwen2VLImageProcessor.from_hf(hf)


def _call(proc: Any, images: list[Any], kwargs: dict[str, Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return proc(images=images, return_tensors="pt", **kwargs)


def _same_or_both_refuse(hf: Any, fast: Any, images: list[Any], **kwargs: Any) -> str:
    """Equal outputs; or transformers raises and so do we (a QwenInputError)."""
    try:
        expected = _call(hf, images, kwargs)
    except (ValueError, ZeroDivisionError, RuntimeError, OSError, TypeError):
        with pytest.raises(QwenInputError):
            _call(fast, images, kwargs)
        return "both refuse"
    assert_same(expected, _call(fast, images, kwargs))
    return "same"


def _same_or_we_refuse(hf: Any, fast: Any, images: list[Any], **kwargs: Any) -> str:
    """As above, or only we refuse: the engine patches then answer with transformers."""
    try:
        got = _call(fast, images, kwargs)
    except QwenInputError:
        return "we refuse"
    assert_same(_call(hf, images, kwargs), got)
    return "same"


# -- the classes and what they do with transparency ----------------------------------------
def test_backend_classes_are_mirrored(verdicts):
    """Classes with transformers 5's ``backend`` are mirrored exactly (no standing aside)."""
    assert CLASSES, f"transformers {transformers.__version__} exports no Qwen2-VL image processor"
    for (name, config), reason in verdicts.items():
        if getattr(_build(name, config), "backend", None) in ("torchvision", "pil"):
            assert reason is None, (transformers.__version__, name, config, reason)


@pytest.mark.parametrize("name", list(CLASSES))
def test_transparency_rule_is_recognised(name):
    """The probe names what this transformers does (drop alpha or composite on white)."""
    fast = FastQwen2VLImageProcessor.from_hf(_build(name, "qwen2.5-vl"))
    rules = fast.rgb_rules()
    assert rules.transparency in (DROP, WHITE), rules.detail


# -- the parity subset -------------------------------------------------------------------------
def _mode_images() -> dict[str, Image.Image]:
    rgba = Image.fromarray(rand_array(6, 97, 61, 4))
    alpha = np.asarray(rgba).copy()
    alpha[:2, :, 3] = 0
    alpha[2:4, :, 3] = 255
    rgba = Image.fromarray(alpha)
    base = rand_image(5, 97, 61)
    gray = Image.fromarray(rand_array(7, 97, 61, 0))
    palette = base.quantize(colors=48)
    images = {
        "RGB": base, "RGBA": rgba, "L": gray, "LA": rgba.convert("LA"), "1": gray.convert("1"),
        "P": palette, "PA": rgba.convert("PA"), "CMYK": base.convert("CMYK"),
        "YCbCr": base.convert("YCbCr"), "HSV": base.convert("HSV"), "LAB": base.convert("LAB"),
        "I": gray.convert("I"), "F": gray.convert("F"),
        "I;16": Image.fromarray(rand_array(9, 97, 61, 0).astype(np.uint16) * 257),
        "RGBa": rgba.convert("RGBa"), "La": rgba.convert("La"),
    }
    one = palette.copy()
    one.info["transparency"] = int(np.asarray(palette)[0, 0])
    images["P+tRNS-index"] = one
    per_index = palette.copy()
    per_index.info["transparency"] = bytes(range(0, 240, 5))
    images["P+tRNS-bytes"] = per_index
    rgb = base.copy()
    rgb.info["transparency"] = tuple(int(v) for v in np.asarray(base)[3, 3])
    images["RGB+tRNS"] = rgb
    gray_t = gray.copy()
    gray_t.info["transparency"] = int(np.asarray(gray)[4, 4])
    images["L+tRNS"] = gray_t
    return images


MODE_IMAGES = _mode_images()


@pytest.mark.parametrize("pil_mode", list(MODE_IMAGES))
def test_every_pil_mode(pair, pil_mode):
    hf, fast = pair
    image = MODE_IMAGES[pil_mode]
    for kwargs in ({}, UINT8):
        _same_or_both_refuse(hf, fast, [image], **kwargs)


def test_random_sizes_both_dtypes(pair):
    hf, fast = pair
    rng = np.random.default_rng(2027)
    sizes = [(int(w), int(h)) for w, h in rng.integers(1, 700, size=(6, 2))] + [(1, 1), (28, 28)]
    images = [smooth_image(i, w, h) if i % 2 else rand_image(i, w, h)
              for i, (w, h) in enumerate(sizes)]
    for kwargs in ({}, UINT8):
        for image in images:
            _same_or_both_refuse(hf, fast, [image], **kwargs)
        _same_or_both_refuse(hf, fast, images, **kwargs)
    transparent = [MODE_IMAGES["RGBA"], MODE_IMAGES["P+tRNS-bytes"], images[0], MODE_IMAGES["LA"]]
    _same_or_both_refuse(hf, fast, transparent)
    _same_or_both_refuse(hf, fast, transparent, **UINT8)


def test_per_call_pixel_limits(pair):
    """What the engines pass per request (mm_processor_kwargs): limits as size, min and max
together, or one alone."""
    hf, fast = pair
    images = [smooth_image(3, 640, 480), rand_image(4, 200, 333)]
    factor = fast.config.factor
    limits = {"shortest_edge": (2 * factor) ** 2, "longest_edge": (12 * factor) ** 2}
    _same_or_both_refuse(hf, fast, images, size=limits)
    _same_or_both_refuse(hf, fast, images, size=limits, **UINT8)
    _same_or_both_refuse(hf, fast, images, min_pixels=limits["shortest_edge"],
                         max_pixels=limits["longest_edge"])
    # alone: ignored before transformers 5.18, honoured after (followed, rgb_rules)
    _same_or_both_refuse(hf, fast, images, max_pixels=limits["longest_edge"])
    _same_or_both_refuse(hf, fast, images, min_pixels=(10 * factor) ** 2, **UINT8)
    for height, width in [(1, 1), (555, 777), (3024, 4032)]:
        # {} rather than None: transformers 4.57's Fast class fails on None (its own bug)
        for kwargs in ({}, {"min_pixels": 100 * 100, "max_pixels": 200 * 200}):
            assert fast.get_number_of_image_patches(height, width, kwargs) == \
                hf.get_number_of_image_patches(height, width, kwargs), (height, width, kwargs)


def test_arrays_and_tensors(pair):
    """3-channel arrays are exact; 1- and 4-channel ones (which transformers 5.21+ reads) and
    an HWC array 4 rows high (5.21+ takes its first axis for channels) are exact or refused."""
    hf, fast = pair
    hwc = rand_array(11, 131, 77)
    for array in (hwc, np.ascontiguousarray(hwc.transpose(2, 0, 1))):
        _same_or_both_refuse(hf, fast, [array])
        _same_or_both_refuse(hf, fast, [torch.from_numpy(array)], **UINT8)
    for array in (rand_array(12, 90, 4), rand_array(13, 40, 30, 4), rand_array(14, 40, 30, 1)):
        _same_or_we_refuse(hf, fast, [array])


def test_standalone_processor_follows_the_installed_transformers(pair):
    """Built from a config (no transformers object to probe), ours probes the installed
    transformers' class of its mode: still exact on transparent images and unscaled output."""
    hf, fast = pair
    name = next(key for key, value in CONFIGS.items() if value["patch_size"] == fast.patch_size)
    alone = FastQwen2VLImageProcessor(CONFIGS[name], mode=fast.mode)
    images = [MODE_IMAGES["RGBA"], MODE_IMAGES["P+tRNS-bytes"], MODE_IMAGES["L+tRNS"]]
    for kwargs in ({}, UINT8):
        _same_or_both_refuse(hf, alone, images, **kwargs)
    _same_or_both_refuse(hf, alone, images[:1], max_pixels=(12 * alone.config.factor) ** 2)
