"""Twins (``patches.adapters.twins``), model-neutral: a stand-in engine processor class.

What the engine patches rely on, whatever processor a kind mirrors: a twin shares its
original's settings (one ``__dict__``), follows settings changed after hand-out (a new decision
per class and settings, probed once), answers with the engine's code when its patch is off or a
call asks for a device (unless ``VLM_FASTPATH_CPU_PREPROCESS``), and its copies (``copy``,
``deepcopy``, pickle) are twins; views never modify the engine's objects.
"""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import pytest

from vlm_fastpath.patches.adapters import twins
from vlm_fastpath.patches.adapters.switches import SWITCHES
from vlm_fastpath.patches.core.base import PatchResult, PatchStatus
from vlm_fastpath.patches.core.status import with_models

PATCH = "fake-twin-patch"


class EngineProcessor:
    """Stands for a transformers processor class the engine holds."""

    def __init__(self, scale: int = 2) -> None:
        self.scale = scale
        self.size = {"longest_edge": 10}

    def preprocess(self, images: list[int], **kwargs: Any) -> tuple[str, list[int]]:
        return ("engine", [i * self.scale for i in images])

    def __call__(self, images: list[int], **kwargs: Any) -> tuple[str, list[int]]:
        return self.preprocess(images, **kwargs)


class HFProcessor:
    """Stands for the HF processor object holding the image processor and a tokenizer."""

    def __init__(self) -> None:
        self.image_processor = EngineProcessor()
        self.tokenizer = object()


class Fast:
    """Our fast object for one setting of ``scale``."""

    def __init__(self, scale: int) -> None:
        self.scale = scale

    def preprocess(self, images: list[int], **kwargs: Any) -> tuple[str, list[int]]:
        return ("ours", [i * self.scale for i in images])


class FakeTwinMixin(twins.TwinMixin):
    __slots__ = ()

    def preprocess(self, images: list[int], **kwargs: Any) -> tuple[str, list[int]]:
        engine = functools.partial(self._vlm_original.preprocess, images, **kwargs)
        if not self.vlm_serves(kwargs):
            return engine()
        fast = self.vlm_fast()
        return engine() if fast is None else fast.preprocess(images, **kwargs)

    def __call__(self, images: list[int], **kwargs: Any) -> tuple[str, list[int]]:
        return self.preprocess(images, **kwargs)


class FakeKind(twins.TwinKind):
    label = "fake-for-tests"
    attr = "image_processor"
    mixin = FakeTwinMixin

    def __init__(self) -> None:
        super().__init__()
        self.judged: list[int] = []

    def mirrors(self, obj: Any) -> bool:
        return isinstance(obj, EngineProcessor)

    def judge(self, original: Any) -> tuple[Any, str]:
        self.judged.append(original.scale)
        if original.scale >= 10:
            return None, "probe differs: scale 10 and up"
        return Fast(original.scale), ""

    def twin_class(self, original: Any) -> type:
        return FakeTwin


KIND = FakeKind()
FakeTwin = type("FastpathEngineProcessor", (FakeTwinMixin, EngineProcessor),
                {"__slots__": (), "_vlm_kind": KIND, "__module__": __name__})


@pytest.fixture(autouse=True)
def applied(monkeypatch):
    monkeypatch.setattr(SWITCHES, PATCH, True, raising=False)
    KIND.forget()
    KIND.judged.clear()
    yield
    KIND.forget()


def _twin(original: EngineProcessor | None = None) -> Any:
    twin, reason = KIND.twin_of(original or EngineProcessor(), PATCH)
    assert twin is not None, reason
    return twin


def test_a_twin_shares_its_originals_settings():
    original = EngineProcessor()
    twin = _twin(original)
    assert isinstance(twin, EngineProcessor) and twin.__dict__ is original.__dict__
    assert twin([1, 2]) == ("ours", [2, 4])
    twin.size = {"longest_edge": 5}  # set through what the engine was handed
    assert original.size == {"longest_edge": 5}
    assert set(vars(original)) == {"scale", "size"}  # the engine's object gains nothing
    assert KIND.twin_of(original, PATCH)[0] is twin  # one twin per original


def test_settings_changed_after_hand_out_are_followed():
    twin = _twin()
    assert KIND.judged == [2]
    twin.scale = 3
    assert twin([1]) == ("ours", [3])  # a new decision for the new settings
    twin.scale = 12
    assert twin([1]) == ("engine", [12])  # not reproduced: the engine answers, never stale
    twin.scale = 3
    assert twin([1]) == ("ours", [3])
    assert KIND.judged == [2, 3, 12]  # each setting probed once


def test_revert_and_device_calls_are_the_engines(monkeypatch):
    twin = _twin()
    assert twin([1], device="cuda:0") == ("engine", [2])
    assert twin([1], device="cpu") == ("ours", [2])
    monkeypatch.setenv("VLM_FASTPATH_CPU_PREPROCESS", "1")
    assert twin([1], device="cuda:0") == ("ours", [2])
    monkeypatch.delenv("VLM_FASTPATH_CPU_PREPROCESS")
    monkeypatch.setattr(SWITCHES, PATCH, False)  # the patch reverted
    assert twin([1]) == ("engine", [2])


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_copies_of_a_twin_are_twins(how):
    twin = _twin()
    twin.scale = 4
    twin([1])
    judged = list(KIND.judged)
    clone = {"copy": copy.copy, "deepcopy": copy.deepcopy,
             "pickle": lambda t: pickle.loads(pickle.dumps(t))}[how](twin)
    assert isinstance(clone, FakeTwin) and clone is not twin
    assert clone.__dict__ is clone.vlm_original().__dict__
    assert clone.__dict__ is not twin.__dict__  # a copy's settings are its own
    assert clone([1]) == ("ours", [4])
    assert KIND.judged == judged  # decided per class and settings: no new probe
    clone.scale = 5
    assert twin.scale == 4


def test_a_view_carries_the_twin_and_leaves_the_engines_object_alone():
    hf = HFProcessor()
    engine_image_processor = hf.image_processor
    view = KIND.processor_view(hf, PATCH)
    assert view is not hf and view.tokenizer is hf.tokenizer
    assert KIND.is_twin(view.image_processor)
    assert hf.image_processor is engine_image_processor  # never modified
    assert KIND.processor_view(hf, PATCH) is view  # one view per original
    assert KIND.processor_view(view, PATCH) is view
    deep = copy.deepcopy(view)
    assert KIND.is_twin(deep.image_processor) and deep.image_processor([1]) == ("ours", [2])


def test_what_ours_does_not_reproduce_keeps_the_engines():
    hf = HFProcessor()
    hf.image_processor.scale = 20
    assert KIND.processor_view(hf, PATCH) is hf
    twin, reason = KIND.twin_of(hf.image_processor, PATCH)
    assert twin is None and reason == "probe differs: scale 10 and up"


def test_status_names_each_model_served_and_kept():
    applied = PatchResult("p", "vllm", PatchStatus.APPLIED, "summary", "1.0")
    both = with_models(applied, {"A": "", "B": "probe differs"})
    assert both.status is PatchStatus.APPLIED
    assert both.reason == "summary; serves A; B keeps the engine's processor: probe differs"
    kept = with_models(applied, {"B": "the engine preprocesses on cuda:0"})
    assert kept.status is PatchStatus.STOOD_ASIDE  # never "applied" for a model not served
    assert "B keeps the engine's processor: the engine preprocesses on cuda:0" in kept.reason
