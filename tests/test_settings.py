"""One parser for every ``VLM_FASTPATH*`` variable, documented in the README, shared by the .pth."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_fastpath import settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vlm_fastpath"
NAME = re.compile(r"VLM_FASTPATH(?:_[A-Z0-9]+)*\b")


def _readme_variables() -> set[str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Controls"):text.index("Python API")]
    return {m for line in table.splitlines() if line.startswith("| `") for m in NAME.findall(line)}


def test_every_variable_the_code_names_is_documented() -> None:
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(NAME.findall(path.read_text()))
    named.discard("VLM_FASTPATH_")  # a prefix in docstrings
    assert named <= set(settings.VARIABLES), sorted(named - set(settings.VARIABLES))
    assert set(settings.VARIABLES) == _readme_variables()


def test_only_the_settings_module_reads_the_environment() -> None:
    reads = re.compile(r"os\.environ|os\.getenv|environ\.get")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if reads.search(line) and "VLM_FASTPATH" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == []


VALUES = ["0", "1", "", "OFF", " off ", "False", "no", "NO ", "yes", "on", "2", "auto"]


@pytest.mark.parametrize("value", VALUES)
def test_pth_and_settings_agree(value: str, tmp_path: Path) -> None:
    """The .pth's inline test (it runs before any import) means what ``settings`` means."""
    line = (ROOT / "vlm_fastpath.pth").read_text().strip()
    condition = line[line.index(" if ") + 4:line.rindex(" else ")]
    fake_os = type("os", (), {"environ": {"VLM_FASTPATH": value}})
    pth_enabled = eval(condition, {"os": fake_os})  # noqa: S307 - our own file
    os.environ["VLM_FASTPATH"] = value
    try:
        assert pth_enabled == settings.enabled()
    finally:
        del os.environ["VLM_FASTPATH"]


def test_doctor_reads_the_switch_like_the_registry() -> None:
    env = dict(os.environ, VLM_FASTPATH=" OFF ")
    proc = subprocess.run(
        [sys.executable, "-m", "vlm_fastpath", "doctor", "--json", "--no-import"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    report = json.loads(proc.stdout)
    assert report["disabled"] is True
    assert {p["status"] for p in report["patches"]} == {"disabled"}


def test_lists_and_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_SKIP", " a, b ,,")
    assert settings.skipped_patches() == {"a", "b"}
    monkeypatch.setenv("VLM_FASTPATH_PATCHES", "  ")
    assert settings.only_patches() is None
    for value, mode in (("1", "on"), ("OFF", "off"), ("", "auto"), ("maybe", "auto")):
        monkeypatch.setenv("VLM_FASTPATH_DEFER", value)
        assert settings.defer_mode() == mode
    monkeypatch.setenv("VLM_FASTPATH_RESIZE_THREADS", "three")
    assert settings.resize_threads() is None
    monkeypatch.setenv("VLM_FASTPATH_RESIZE_THREADS", "0")
    assert settings.resize_threads() == 1


def test_unknown_variable_is_a_bug() -> None:
    with pytest.raises(KeyError):
        settings._raw("VLM_FASTPATH_TYPO")
