"""ci/suite_cache.py: a suite is skipped only after a pass with exactly the same inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, label: str, *command: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
               "VLM_FASTPATH_ENV_CACHE": str(tmp_path / "envs"), **env}
    return subprocess.run([sys.executable, str(ROOT / "ci/suite_cache.py"), "-", label, "--",
                           *command], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def counter(tmp_path: Path) -> tuple[Path, list[str]]:
    """A command that appends a line to a file each time it really runs."""
    log = tmp_path / "ran.log"
    return log, [sys.executable, "-c", f"open({str(log)!r}, 'a').write('x\\n')"]


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_pass_is_reused_only_with_the_same_inputs(tmp_path, counter):
    log, command = counter
    first = _run(tmp_path, "demo", *command)
    assert first.returncode == 0, first.stderr
    assert _runs(log) == 1
    again = _run(tmp_path, "demo", *command)
    assert again.returncode == 0 and _runs(log) == 1, again.stdout
    assert "not re-run" in again.stdout
    # a setting the suite may read, a different command, SUITE_FORCE: each runs it again
    assert _run(tmp_path, "demo", *command, VLM_FASTPATH_SKIP="x").returncode == 0
    assert _runs(log) == 2
    assert _run(tmp_path, "demo", *command, "extra-arg").returncode == 0
    assert _runs(log) == 3
    assert _run(tmp_path, "demo", *command, SUITE_FORCE="1").returncode == 0
    assert _runs(log) == 4


def test_failures_are_never_recorded(tmp_path):
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    assert _run(tmp_path, "bad", *failing).returncode == 3
    assert _run(tmp_path, "bad", *failing).returncode == 3  # runs (and fails) again
    assert not list((tmp_path / "results").glob("bad*.json"))


def test_a_changed_checkout_file_changes_the_key(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_suite_cache", ROOT / "ci/suite_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = module.suite_key("-", ["true"])
    assert before is not None and before == module.suite_key("-", ["true"])
    probe = ROOT / "tests" / f"_suite_cache_probe_{tmp_path.name}.txt"  # untracked, not ignored
    try:
        probe.write_text("a")
        with_file = module.suite_key("-", ["true"])
        probe.write_text("b")
        changed = module.suite_key("-", ["true"])
    finally:
        probe.unlink(missing_ok=True)
    assert len({before, with_file, changed}) == 3
    assert module.suite_key("-", ["true"]) == before
