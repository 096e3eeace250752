"""The e2e proof check must fail a with/without pair that ran the same code (no server needed)."""

from __future__ import annotations

from benchmarks.serving import run as e2e

KIMI = e2e.MODELS["kimi"]
API = "(APIServer pid=100) INFO 11-29 11:27:14 [launcher.py:195] Route: /health\n"
FASTPATH = (
    "INFO vlm_fastpath.patches: vlm_fastpath (pid 100): upstream: vllm-kimi-processor; "
    "applied: vllm-kimi-fused-processor\n"
)


def probe(proc: str, items: int = 4, pid: int = 100, fastpath: str = "-") -> str:
    return f"VLMFP_PROBE pid={pid} proc={proc} items={items} ms=12.5 fastpath={fastpath}\n"


def test_with_plugin_and_our_processor_passes() -> None:
    log = API + FASTPATH + probe(e2e.OURS, fastpath="vllm-kimi-fused-processor") * 3
    proof = e2e.check_proof(KIMI, "with", log, requests=3, images=12)
    assert proof["problems"] == []
    assert proof["applied"] == ["vllm-kimi-fused-processor"]


def test_without_plugin_and_vllm_processor_passes() -> None:
    log = API + probe(e2e.VLLM_KIMI) * 3
    assert e2e.check_proof(KIMI, "without", log, requests=3, images=12)["problems"] == []


def test_same_code_in_both_runs_fails() -> None:
    # "with" run where vLLM's processor served: the plugin did not take effect
    log = API + FASTPATH + probe(e2e.VLLM_KIMI) * 3
    problems = e2e.check_proof(KIMI, "with", log, requests=3, images=12)["problems"]
    assert any(e2e.OURS in p for p in problems)
    assert any(e2e.VLLM_KIMI in p for p in problems)
    # "without" run where the plugin still loaded and our processor served
    log = API + FASTPATH + probe(e2e.OURS) * 3
    problems = e2e.check_proof(KIMI, "without", log, requests=3, images=12)["problems"]
    assert any("VLM_FASTPATH=0 but" in p for p in problems)
    assert any(e2e.OURS in p for p in problems)


def test_plugin_not_loaded_fails() -> None:
    log = API + probe(e2e.OURS) * 3
    problems = e2e.check_proof(KIMI, "with", log, requests=3, images=12)["problems"]
    assert any("did not load" in p for p in problems)


def test_calls_in_other_processes_do_not_count() -> None:
    # memory-profiling calls in EngineCore (another pid) are not requests served
    log = API + FASTPATH + probe(e2e.OURS, pid=200) * 3
    problems = e2e.check_proof(KIMI, "with", log, requests=3, images=12)["problems"]
    assert problems


def test_preprocessing_per_request_with_and_without_decoding(tmp_path) -> None:
    """Per request: the processor's time, and with the loader's (decode) lines added."""
    log = tmp_path / "server.log"
    requests = [(30.0, 100.0), (10.0, 50.0), (20.0, 70.0)]  # (load ms, processor ms)
    log.write_text(API + FASTPATH + "".join(
        f"VLMFP_PROBE pid=100 proc={e2e.LOAD} items=1 ms={load} fastpath=-\n"
        f"VLMFP_PROBE pid=100 proc={e2e.OURS} items=1 ms={proc} fastpath=-\n"
        for load, proc in requests))
    assert e2e.preproc_per_request(log, 0, 3, (e2e.OURS,)) == (70.0, 3)
    assert e2e.preproc_per_request(log, 0, 3, (e2e.OURS, e2e.LOAD)) == (90.0, 6)
