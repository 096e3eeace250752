"""vLLM engine suite: imports vLLM once per session, offline, against a local Kimi folder."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

# Before transformers is imported: offline, and remote code lands in a throwaway folder.
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="vlm-fastpath-vllm-"))
os.environ.setdefault("HF_HOME", str(_SESSION_DIR / "hf"))
os.environ.setdefault("HF_MODULES_CACHE", str(_SESSION_DIR / "hf" / "modules"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

vllm = pytest.importorskip("vllm", reason="run with an engine env's python (make test-engines)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    import vlm_fastpath

    return [
        f"engine: vllm {vllm.__version__} (env {sys.prefix})",
        f"vlm_fastpath {vlm_fastpath.__version__} from {Path(vlm_fastpath.__file__).parent}",
    ]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    # The header is hidden under -q; say which engine this run covered in every mode.
    terminalreporter.write_line(f"engine suite ran against vllm {vllm.__version__} ({sys.prefix})")


@pytest.fixture(scope="session", autouse=True)
def _model_info_cached():
    """vLLM's model-info cache holds every architecture the suite loads before the first test
    (one subprocess, not one per architecture: fixtures/vllm_model_info.py)."""
    from fixtures import vllm_model_info

    vllm_model_info.fill(vllm_model_info.architectures())


@pytest.fixture(scope="session")
def vllm_version():
    from packaging.version import Version

    return Version(Version(vllm.__version__).public)


@pytest.fixture(scope="session")
def kimi_module():
    from vllm.model_executor.models import kimi_k25

    return kimi_k25


@pytest.fixture(scope="session")
def model_dir():
    from fixtures.vllm_kimi_model import make_model_dir

    return make_model_dir(_SESSION_DIR)


@pytest.fixture(autouse=True)
def _patches_applied(kimi_module):
    """Every test starts (and ends) with the patches as the .pth door applied them."""
    import vlm_fastpath
    from fixtures.vllm_kimi_model import clear_processor_caches

    vlm_fastpath.apply("vllm")
    yield
    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    vlm_fastpath.apply("vllm")
