"""``LazyKernels.columns``: a kernel module's frame-table columns, read once."""

from __future__ import annotations

import sys
import types

import pytest

from vlm_fastpath.imaging.numba_launch import LazyKernels


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("vlm_fastpath_fake_kernels")
    module.patchify_parallel = module.patchify_serial = lambda *a: None
    module.F_SRC, module.F_OUT, module.FRAME_COLUMNS, module.G_OTHER = 0, 1, 2, 7
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setenv("VLM_FASTPATH_NUMBA", "1")
    return module


def test_columns_are_the_prefixed_constants(fake_module: types.ModuleType) -> None:
    lazy = LazyKernels(fake_module.__name__, "fake")
    assert lazy.columns("F_") == {"F_SRC": 0, "F_OUT": 1}
    assert lazy.columns("G_") == {"G_OTHER": 7}


def test_columns_are_read_once(fake_module: types.ModuleType) -> None:
    lazy = LazyKernels(fake_module.__name__, "fake")
    first = lazy.columns("F_")
    fake_module.F_LATE = 5  # a later change to the module is not looked up again
    assert lazy.columns("F_") is first
    assert "F_LATE" not in first


def test_columns_without_numba_are_empty(monkeypatch: pytest.MonkeyPatch,
                                         fake_module: types.ModuleType) -> None:
    monkeypatch.setenv("VLM_FASTPATH_NUMBA", "0")
    assert LazyKernels(fake_module.__name__, "fake").columns("F_") == {}
