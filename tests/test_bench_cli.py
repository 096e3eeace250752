"""``vlm-fastpath bench``: runs from the package alone (a wheel, no checkout), on tiny workloads.

The subprocess runs are what a user types; the in-process ones pin the parts a subprocess
cannot see cheaply (exactness verdicts, rotation, terminal-only progress).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.bench.contenders import Contender, Family, RunFn
from vlm_fastpath.bench.report import format_table
from vlm_fastpath.bench.runner import Progress, bench_workload
from vlm_fastpath.bench.workloads import Workload, WorkloadError, parse_spec
from vlm_fastpath.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--workload", "1x64x64", "--rounds", "1"]


def _bench(*args: str, cwd: Path, env: dict[str, str] | None = None,
           exe: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, stdout and stderr piped (so neither is a terminal)."""
    if env is None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = (exe or [sys.executable, "-m", "vlm_fastpath"]) + ["bench", *args]
    # Bytes, decoded by hand: text=True would turn every "\r" into "\n" and hide it.
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=300)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str],
                                                                 Path]:
    """One subprocess run shared by the checks on its output (each run loads torch: seconds)."""
    out = tmp_path_factory.mktemp("bench")
    result = _bench(*TINY, "--json", str(out / "r.json"), "--png", str(out / "r.png"), cwd=out)
    return result, out


def _png_ok_or_skipped(result: subprocess.CompletedProcess[str], png: Path) -> None:
    if importlib.util.find_spec("matplotlib") is not None:
        assert png.stat().st_size > 0, result.stdout
    else:
        assert "chart: skipped (matplotlib is not installed;" in result.stdout


def test_runs_and_reports_absent_engines(tiny_run: tuple[subprocess.CompletedProcess[str], Path],
                                         ) -> None:
    result, out = tiny_run
    assert result.returncode == 0, result.stderr
    table = result.stdout
    assert "median ms" in table and "img/s" in table and "speedup" in table
    assert any(
        line.split()[:3] == ["kimi", "1x64x64", "vlm-fastpath"] for line in table.splitlines()
    ), table
    if importlib.util.find_spec("vllm") is None:
        assert "absent: kimi vllm-fused: vLLM is not installed" in table
    engines = [e for e in ("vllm", "sglang") if importlib.util.find_spec(e) is not None]
    if not engines:
        assert "engine uses ours (kimi): no engine: neither vLLM nor SGLang" in table
    _png_ok_or_skipped(result, out / "r.png")


def _status(name: str, status: str, version: str | None = "0.34.0", reason: str = "r") -> dict:
    return {"name": name, "engine": "vllm", "engine_version": version, "status": status,
            "reason": reason}


def test_engine_use_follows_the_patch_status() -> None:
    from vlm_fastpath.bench.engine_use import decide

    applied = decide("kimi", [_status("vllm-kimi-fused-processor", "applied"),
                              _status("vllm-kimi-processor", "upstream")])
    assert applied.used is True and applied.mark == "yes"
    assert "vllm-kimi-fused-processor applied" in applied.detail
    capped = decide("qwen-tv", [
        _status("vllm-qwen-vl-image-processor", "unsupported-version",
                reason="outside >=0.22,<0.34"),
        _status("sglang-qwen-vl-cpu-image-processor", "pending", version=None),
        _status("vllm-kimi-fused-processor", "applied"),  # another family's patch
    ])
    assert capped.used is False and capped.mark == "NO"
    assert "unsupported-version (outside >=0.22,<0.34)" in capped.detail
    assert decide("kimi", [_status("vllm-kimi-fused-processor", "pending", None)]).used is None


def test_non_tty_output_has_no_carriage_returns(
    tiny_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = tiny_run
    assert "\r" not in result.stdout and "\r" not in result.stderr
    # Progress still shows, as plain lines.
    assert "kimi 1x64x64: done, 1 round x" in result.stderr


def test_json_has_the_rows(tiny_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, out = tiny_run
    data = json.loads((out / "r.json").read_text())
    rows = [r for r in data["rows"] if r["family"] == "kimi"]
    ours = next(r for r in rows if r["contender"] == "vlm-fastpath")
    assert ours["workload"] == "1x64x64" and ours["images"] == 1 and ours["ours"]
    assert ours["median_ms"] > 0 and ours["first_ms"] > 0 and len(ours["runs_ms"]) == 1
    for row in rows:
        if not row["ours"]:
            assert row["exact"] is True, row  # vLLM's fused processor is bit-exact with ours
    assert data["settings"]["workloads"] == ["1x64x64"]
    assert data["environment"]["cores"] >= 1
    if importlib.util.find_spec("vllm") is None:
        assert {"family": "kimi", "name": "vllm-fused", "reason": "vLLM is not installed"} in (
            data["absent"]
        )


def test_own_images_folder(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(folder / "a.png")
    rgba = rng.integers(0, 256, (33, 47, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(folder / "b.PNG")
    (folder / "notes.txt").write_text("not an image")
    result = _bench("--images", str(folder), "--rounds", "1", "--no-png", "--json",
                    str(tmp_path / "r.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "photos (2 images)" in result.stdout
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert {r["images"] for r in rows} == {2}
    assert not (tmp_path / "vlm-fastpath-bench.png").exists()


def test_empty_images_folder_is_a_clear_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "readme.txt").write_text("no pictures here")
    assert main(["bench", "--images", str(tmp_path), "--no-png"]) == 2
    err = capsys.readouterr().err
    assert "no images found" in err and str(tmp_path) in err and ".jpg" in err


def test_missing_folder_and_bad_workload(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--images", str(tmp_path / "nope"), "--no-png"]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--workload", "big"])
    assert exc.value.code == 2
    assert "COUNTxWIDTHxHEIGHT" in capsys.readouterr().err


def test_parse_spec() -> None:
    assert parse_spec("4x1536x1024").name == "4x1536x1024"
    assert parse_spec("2X512").name == "2x512x512"
    for bad in ("0x64", "4x", "x64x64", "1x99999"):
        with pytest.raises(WorkloadError):
            parse_spec(bad)


def _fake_family(log: list[str], engine_output: torch.Tensor) -> Family:
    ours_output = torch.zeros(2, 3)

    def make(name: str, output: torch.Tensor) -> RunFn:
        def run(images: Sequence[Image.Image]) -> tuple[torch.Tensor, ...]:
            log.append(name)
            return (output.clone(),)

        return run

    return Family("fake", "fake", contenders=[
        Contender("engine", make("engine", engine_output), "test", baseline=True),
        Contender("other", make("other", ours_output), "test"),
        Contender("vlm-fastpath", make("ours", ours_output), "test", ours=True),
    ])


def test_exactness_verdicts_and_speedup_column() -> None:
    workload = Workload("1x8x8", (Image.new("RGB", (8, 8)),))
    log: list[str] = []
    rows, failures = bench_workload(
        _fake_family(log, torch.ones(2, 3)), workload, 1, Progress(enabled=False)
    )
    assert not failures
    by_name = {r.contender: r for r in rows}
    assert by_name["engine"].exact is False and by_name["other"].exact is True
    assert by_name["vlm-fastpath"].exact is None and by_name["engine"].speedup == 1.0
    assert [r.contender for r in rows] == ["engine", "other", "vlm-fastpath"]
    columns = [line.split()[-2:] for line in format_table(rows).splitlines()[2:]]
    assert [c[0] for c in columns] == ["NO", "yes", "(ref)"]
    assert [c[1] for c in columns] == ["-", "-", "-"]  # no engine decision was made here


def test_order_rotates_each_round() -> None:
    workload = Workload("1x8x8", (Image.new("RGB", (8, 8)),))
    log: list[str] = []
    bench_workload(_fake_family(log, torch.zeros(2, 3)), workload, 3, Progress(enabled=False))
    first_calls, rounds = log[:3], [log[3:6], log[6:9], log[9:12]]
    assert first_calls[0] == "ours"  # ours first: every other output is checked against it
    assert [r[0] for r in rounds] == ["ours", "engine", "other"]
    assert all(sorted(r) == ["engine", "other", "ours"] for r in rounds)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Terminal())
    live = _Terminal()
    progress = Progress(live)
    progress.update("round 1/3")
    progress.step("done")
    assert "\r" in live.getvalue() and live.getvalue().endswith("done\n")

    monkeypatch.setattr(sys, "stdout", io.StringIO())  # stdout piped: never a carriage return
    plain = _Terminal()
    progress = Progress(plain)
    progress.update("round 1/3")
    progress.step("done")
    progress.clear()
    assert plain.getvalue() == "done\n"


def _copy_sources(dest: Path) -> Path:
    """What a wheel is built from, copied so the build leaves no build/ or egg-info here."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "vlm_fastpath.pth"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "vlm_fastpath", src / "vlm_fastpath",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


def _isolation() -> list[str]:
    """Build with this env's setuptools when it can write wheels itself (>= 70.1, offline);
    otherwise let pip fetch the build requirements into an isolated env."""
    try:
        import setuptools
        from packaging.version import Version
    except ImportError:
        return []
    return ["--no-build-isolation"] if Version(setuptools.__version__) >= Version("70.1") else []


@pytest.mark.slow
def test_installed_wheel_runs_outside_the_checkout(tmp_path: Path) -> None:
    # No PYTHONPATH anywhere below: a checkout on it would make pip think we are installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    src = _copy_sources(tmp_path)
    subprocess.run([*pip, "wheel", "--no-deps", *_isolation(), "-w", str(tmp_path / "dist"),
                    str(src)], check=True, timeout=300, env=env)
    wheel = next((tmp_path / "dist").glob("vlm_fastpath-*.whl"))
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120, env=env)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", str(wheel)],
                   check=True, timeout=300, env=env)
    # The fresh env borrows torch/numpy/Pillow from this one as a plain path entry: that
    # directory's .pth files (our editable install among them) are not processed, so only
    # the wheel's vlm_fastpath is importable.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True,
                          env=env).stdout
    Path(site.strip(), "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    exe = [str(venv / "bin" / "vlm-fastpath")]
    result = _bench(*TINY, "--json", "r.json", cwd=work, env=env, exe=exe)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "needs a source checkout" not in result.stdout
    data = json.loads((work / "r.json").read_text())
    assert Path(data["environment"]["package_dir"]).is_relative_to(venv)
    assert any(r["contender"] == "vlm-fastpath" for r in data["rows"])
    _png_ok_or_skipped(result, work / "vlm-fastpath-bench.png")

    serve = _bench("serve", cwd=work, env=env, exe=exe)
    assert serve.returncode == 2 and "make e2e" in serve.stdout
