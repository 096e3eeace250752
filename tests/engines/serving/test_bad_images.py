"""Bad images through the real vLLM server, with and without vlm-fastpath.

The probe's HTTP cases: every undecodable image is the client's error (HTTP 400 with vLLM's
own message), the same with and without the plugin; a decompression bomb is a 400 with the
plugin (vLLM alone answers 500: ``DecompressionBombError`` is not an ``OSError``); after the
bad requests the server is healthy and still answers a valid image request.
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from benchmarks.serving import run as e2e
from fixtures import bad_images

from .test_smoke import _chat, _in_serving_env

pytestmark = pytest.mark.skipif(
    not _in_serving_env(),
    reason="needs the serving environment's python (make -f ci/serving.mk test-e2e-smoke)",
)

ENV_DIR = Path(sys.prefix)
CASES = {
    "truncated-jpeg": ("image/jpeg", bad_images.truncated(bad_images.jpeg_bytes(512, 512))),
    "truncated-png": ("image/png", bad_images.truncated(bad_images.png_bytes(512, 512))),
    "garbage": ("image/png", bad_images.garbage()),
    "bomb": ("image/png", bad_images.bomb_png()),
}
# What each case answers: (status with the plugin, status without it).
EXPECTED = {"truncated-jpeg": (400, 400), "truncated-png": (400, 400), "garbage": (400, 400),
            "bomb": (400, 500)}


def _post(base_url: str, model: str, mime: str, data: bytes) -> tuple[int, str]:
    url = f"data:{mime};base64," + base64.b64encode(data).decode()
    body = {
        "model": model,
        "max_tokens": 2,
        "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe this image."},
        ]}],
    }
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text).get("error", {}).get("message", text)
        except (ValueError, AttributeError):
            message = text
        return exc.code, str(message)


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=10) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[str, dict[str, tuple[int, str]]]:
    """Every case's (status, message) from one server per mode; health and a valid request."""
    import subprocess

    spec = e2e.MODELS["kimi"]
    subprocess.run([sys.executable, "-m", "benchmarks.serving.checkpoints", spec.checkpoint],
                   check=True, cwd=e2e.ROOT)
    model_dir = e2e.CACHE / "models" / spec.checkpoint
    out: dict[str, dict[str, tuple[int, str]]] = {}
    for mode in ("with", "without"):
        log_path = tmp_path_factory.mktemp(mode) / "server.log"
        server = e2e.start_server(ENV_DIR, model_dir, spec, mode, e2e.free_port(), log_path)
        try:
            try:
                e2e.wait_healthy(server, timeout=300)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"server ({mode}) did not start: {exc}\n{server.tail()}")
            got = {name: _post(server.base_url, str(model_dir), mime, data)
                   for name, (mime, data) in CASES.items()}
            got["healthy-after"] = (200 if _healthy(server.base_url) else 0, "")
            answer = _chat(server.base_url, str(model_dir))
            got["valid-after"] = (200 if answer.get("choices") else 0, "")
            out[mode] = got
        finally:
            e2e.stop_server(server)
    print("\nbad images over HTTP (status, message):")
    for name in (*CASES, "healthy-after", "valid-after"):
        print(f"  {name:16s} with: {out['with'][name]}  without: {out['without'][name]}")
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_status_with_and_without_the_plugin(answers, name):
    with_plugin, without = EXPECTED[name]
    assert answers["with"][name][0] == with_plugin, answers["with"][name]
    assert answers["without"][name][0] == without, answers["without"][name]


@pytest.mark.parametrize("name", ["truncated-jpeg", "truncated-png", "garbage"])
def test_same_message_with_and_without_the_plugin(answers, name):
    assert answers["with"][name][1] == answers["without"][name][1]
    assert "Failed to load image" in answers["with"][name][1]


def test_bomb_message_names_the_problem(answers):
    message = answers["with"]["bomb"][1]
    assert "Failed to load image" in message and "decompression bomb" in message


@pytest.mark.parametrize("mode", ["with", "without"])
def test_server_healthy_and_serving_after_bad_images(answers, mode):
    assert answers[mode]["healthy-after"][0] == 200
    assert answers[mode]["valid-after"][0] == 200
