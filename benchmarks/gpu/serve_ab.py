"""GPU A/B of vlm-fastpath in a real server: vLLM and SGLang, with and without the plugin.

    python -m benchmarks.gpu.serve_ab --model /path/to/checkpoint [--engines vllm,sglang]
    python -m benchmarks.gpu.serve_ab --model /path/to/checkpoint --dry-run   # commands only

Same protocol as benchmarks/serving/run.py (the CPU version): per engine, start the server on
127.0.0.1 with vlm-fastpath (default) and with ``VLM_FASTPATH=0``, wait for health, warm up,
send image requests with fresh random images at concurrency 1 and at a fixed higher request
rate, stop the server by its process id, print median/P90/P99 TTFT and req/s side by side.
Each engine's server log must show the vlm_fastpath line with the plugin and none without it.

Sized for one GPU within 8 minutes: 4 server starts (about 60-90 s each for a mid-size
checkpoint) plus, per server, 2 warm-up + 16 + 24 requests of 4x2048² images. Run it with the
python of an environment that has the engine(s) and vlm-fastpath installed (``pip install``,
not editable, so the .pth and entry points are real). SGLang cannot serve on CPU: the CPU
machines of this project run benchmarks/serving/run.py instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.serving import run as cpu

RESULTS = cpu.RESULTS
ENGINES = ("vllm", "sglang")


def server_cmd(engine: str, model: str, port: int, args: argparse.Namespace) -> list[str]:
    if engine == "vllm":
        return [args.vllm, "serve", model, "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", str(args.max_model_len),
                "--limit-mm-per-prompt", json.dumps({args.mm_key: args.images}),
                *shlex.split(args.vllm_args)]
    return [args.python, "-m", "sglang.launch_server", "--model-path", model,
            "--host", "127.0.0.1", "--port", str(port), "--context-length",
            str(args.max_model_len), *shlex.split(args.sglang_args)]


def bench_cmd(model: str, port: int, args: argparse.Namespace, *, prompts: int,
              concurrency: int | None, rate: float | None, seed: int, result: Path) -> list[str]:
    cmd = [args.vllm, "bench", "serve", "--backend", "openai-chat",
           "--endpoint", "/v1/chat/completions", "--base-url", f"http://127.0.0.1:{port}",
           "--model", model, "--dataset-name", "random-mm",
           "--random-mm-bucket-config", f"{{({args.size}, {args.size}, 1): 1.0}}",
           "--random-mm-limit-mm-per-prompt", json.dumps({"image": args.images, "video": 0}),
           "--random-mm-base-items-per-request", str(args.images),
           "--random-mm-num-mm-items-range-ratio", "0",
           "--random-input-len", "64", "--random-output-len", "16", "--ignore-eos",
           "--temperature", "0", "--num-prompts", str(prompts), "--seed", str(seed),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
           "--save-result", "--result-dir", str(result.parent),
           "--result-filename", result.name, "--disable-tqdm"]
    if concurrency is not None:
        cmd += ["--max-concurrency", str(concurrency)]
    if rate is not None:
        cmd += ["--request-rate", str(rate)]
    return cmd


def env_for(mode: str) -> dict[str, str]:
    env = cpu.server_env(mode)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    return env


def plan(args: argparse.Namespace) -> list[tuple[str, str, list[str], list[tuple]]]:
    """(engine, mode, server command, [(label, bench command)])."""
    out = []
    tmp = args.out.parent / "serve_ab"
    for engine in args.engines:
        for mode in cpu.MODES:
            port = args.port
            runs = [("warm-up", bench_cmd(args.model, port, args, prompts=2, concurrency=1,
                                          rate=None, seed=9000, result=tmp / "warm.json")),
                    ("concurrency 1", bench_cmd(args.model, port, args, prompts=args.prompts_c1,
                                                concurrency=1, rate=None, seed=1,
                                                result=tmp / f"{engine}-{mode}-c1.json")),
                    (f"rate {args.rate}", bench_cmd(args.model, port, args,
                                                    prompts=args.prompts_rate, concurrency=None,
                                                    rate=args.rate, seed=2,
                                                    result=tmp / f"{engine}-{mode}-rate.json"))]
            out.append((engine, mode, server_cmd(engine, args.model, port, args), runs))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local checkpoint folder")
    parser.add_argument("--engines", default="vllm,sglang")
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--prompts-c1", type=int, default=16)
    parser.add_argument("--prompts-rate", type=int, default=24)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--max-model-len", type=int, default=32768)
    parser.add_argument("--port", type=int, default=0, help="0: pick a free port")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--vllm", default=str(Path(sys.executable).parent / "vllm"))
    parser.add_argument("--mm-key", default="image",
                        help="vLLM --limit-mm-per-prompt key: vision_chunk for Kimi K2.5/K2.6")
    parser.add_argument("--vllm-args", default="--trust-remote-code")
    parser.add_argument("--sglang-args", default="--trust-remote-code")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop before this")
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_ab_gpu.json")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES]
    if bad:
        parser.error(f"unknown engine(s) {bad}; choose from {list(ENGINES)}")
    if args.port == 0:
        args.port = 30000 if args.dry_run else cpu.free_port()
    steps = plan(args)
    if args.dry_run:
        for engine, mode, srv, runs in steps:
            flag = "VLM_FASTPATH=0 " if mode == "without" else ""
            print(f"# {engine} / {mode} vlm-fastpath")
            print(f"{flag}{shlex.join(srv)} &   # then wait for /health, stop by PID at the end")
            for label, cmd in runs:
                print(f"{shlex.join(cmd)}   # {label}")
        return 0
    if not Path(args.model).is_dir():
        print(f"--model must be a local checkpoint folder: {args.model}")
        return 2
    t0 = time.monotonic()
    rows, problems = [], []
    for engine, mode, srv, runs in steps:
        if time.monotonic() - t0 > args.budget_s:
            problems.append(f"time budget reached before {engine}/{mode}")
            break
        log_path = cpu.CACHE / "logs" / f"gpu-{engine}-{mode}.server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cpu.log(f"{engine} / {mode}: {shlex.join(srv)}")
        with open(log_path, "w") as handle:
            proc = subprocess.Popen(srv, stdout=handle, stderr=subprocess.STDOUT,
                                    env=env_for(mode), start_new_session=True)
        server = cpu.Server(proc, args.port, log_path)
        try:
            try:
                cpu.wait_healthy(server, args.start_timeout)
            except Exception as exc:
                cpu.log(f"  server failed to start: {exc}\n{server.tail()}")
                problems.append(f"{engine}/{mode}: server failed to start")
                continue
            client_log = log_path.with_suffix(".client.log")
            for label, cmd in runs:
                cpu.log(f"  {label}")
                raw = cpu.run_bench(cmd, client_log, timeout=max(60.0, args.budget_s))
                if label != "warm-up":
                    rows.append({"model": engine, "mode": mode, "workload":
                                 f"{args.images}x{args.size}", "load": label, "label": label,
                                 **cpu.summarize(raw)})
        finally:
            cpu.stop_server(server)
        text = log_path.read_text(errors="replace")
        has_line = bool(cpu.FASTPATH_RE.search(text))
        if (mode == "with") != has_line:
            problems.append(f"{engine}/{mode}: vlm_fastpath log line "
                            f"{'missing' if mode == 'with' else 'present'}")
    pairs = cpu.pair_rows(rows)
    print(cpu.table(pairs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "problems": problems,
                                    "total_s": time.monotonic() - t0}, indent=2) + "\n")
    cpu.plot(pairs, args.out.with_suffix(".png"))
    for p in problems:
        print(f"PROBLEM: {p}")
    return 3 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
