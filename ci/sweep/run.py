"""The release sweep: every engine release in the declared ranges, checked against its table.

Per release (a line each as it runs):
  1. its env (ci/envs.py: cached outside the checkout, overlay in .envs/);
  2. the engine's own plugin loader in a fresh process (ci/sweep/probe.py plugin): our entry
     point is found, the statuses and what ``vlm-fastpath doctor --json`` prints there equal
     ci/sweep/expected/<engine>.csv; then, in the same process, the env's import check;
  3. ``VLM_FASTPATH=0`` in a fresh process (probe.py toggle): all disabled, no engine object
     is ours; apply changes something iff a patch applies, a second apply changes nothing;
     revert restores every original object (``is``);
  4. the behaviour tests of every applied patch (ci/sweep/behaviour.py) -- skipped on the
     anchor releases, whose full suite ``make test`` runs anyway.
Any mismatch fails the sweep. A release's result is kept in the machine's cache, next to the
envs (``<cache>/../sweep/``), under a key of everything it depends on (its cached env, the
checkout's package sources, the sweep's files, the engine tests, its table rows), so an
unchanged release is not re-run, in this checkout or a fresh clone of the same code on the
same machine (SWEEP_FORCE=1 re-runs all).

    python3.11 ci/sweep/run.py [--engine vllm|sglang] [--release 0.19.1 ...] [--no-page]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "ci"))

import behaviour  # noqa: E402
import coverage_page as coverage  # noqa: E402
import envs  # noqa: E402
from probe import IMPORT_CHECKS  # noqa: E402

RESULTS = envs.cache_root().parent / "sweep"
TIMEOUT = 600


# Behaviour tests run once per (patch, source of the engine modules it patches): a release whose
# patched modules are byte-identical to a release that already ran them (in this run, or in a
# kept result) reuses that verdict and says so. Anchors' full suites count too.
CLAIMS: dict[tuple[str, str, str], str] = {}
CLAIMS_LOCK = threading.Lock()


def modules_hash(env_dir: Path, modules: list[str]) -> str:
    """sha256 over the source files of ``modules`` in a cached env (absent ones named)."""
    site = env_dir / envs.SITE
    digest = hashlib.sha256()
    for name in sorted(modules):
        base = site.joinpath(*name.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"absent"))
    return digest.hexdigest()[:16]


def _claim(engine: str, patch: str, code: str, release: str) -> str:
    """The release that verifies (patch, code): this one unless another got there first."""
    with CLAIMS_LOCK:
        return CLAIMS.setdefault((engine, patch, code), release)


def pin_file(engine: str, release: str) -> Path:
    folder = "engines" if engine == "vllm" else "sglang"
    return ROOT / f"ci/{folder}/{engine}-{release}.txt"


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def result_key(engine: str, release: str, rows: dict) -> str:
    deps = list(HERE.glob("*.py")) + [ROOT / "ci/envs.py", ROOT / IMPORT_CHECKS[engine][0]]
    deps += list((ROOT / "tests/engines" / engine).rglob("*.py"))
    deps += list((ROOT / "tests/support").rglob("*.py"))
    digest = hashlib.sha256()
    digest.update(envs.spec(f"{engine}-{release}").directory().name.encode())
    digest.update(envs._sources_hash().encode())
    digest.update(_hash_files(deps).encode())
    digest.update(json.dumps(sorted((p, s) for p, (s, _) in rows.items())).encode())
    return digest.hexdigest()[:20]


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **(env or {})})


def _result_line(proc: subprocess.CompletedProcess) -> dict:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"no RESULT (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _diff(what: str, got: dict[str, str], want: dict[str, str]) -> list[str]:
    problems = []
    for name in sorted(set(got) | set(want)):
        if got.get(name) != want.get(name):
            problems.append(f"{what}: {name} is {got.get(name)!r}, table says {want.get(name)!r}")
    return problems


def sweep_release(engine: str, release: str, rows: dict, run_behaviour: bool) -> dict:
    """Steps 1-4 for one release; returns {"ok", "problems", "steps", "applied"}."""
    steps: dict[str, str] = {}
    problems: list[str] = []
    name = f"{engine}-{release}"
    start = time.monotonic()
    try:
        here = envs.overlay(name)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        return {"ok": False, "problems": [f"env: {exc}"], "steps": {"env": "failed"}}
    py = str(here / "bin/python")
    steps["env"] = f"{time.monotonic() - start:.0f}s"
    want = {p: s for p, (s, _) in rows.items()}

    t0 = time.monotonic()
    plugin: dict = {}
    try:
        plugin = _result_line(_run([py, "ci/sweep/probe.py", "plugin", engine]))
        imports = plugin.get("imports", {"rc": 1, "output": "no import check result"})
        steps["imports"] = "ok" if imports["rc"] == 0 else "FAILED"
        if imports["rc"]:
            problems.append(f"imports: {imports['output']}")
        if "error" in plugin:
            raise RuntimeError(plugin["traceback"])
        got = {k: v[0] for k, v in plugin["status"].items()}
        problems += _diff("entry point", got, want)
        if not plugin["entry_point"]:
            problems.append("entry point: vlm_fastpath's entry point is not registered")
        if plugin["import_errors"]:
            problems.append(f"entry point: import errors {plugin['import_errors']}")
        report = plugin["doctor"]
        got = {p["name"]: p["status"] for p in report["patches"] if p["engine"] == engine}
        problems += _diff("doctor --json", got, want)
        if plugin["doctor_rc"] or report.get("import_errors"):
            problems.append(f"doctor: rc {plugin['doctor_rc']}, {report.get('import_errors')}")
        steps["plugin+doctor"] = f"ok {time.monotonic() - t0:.0f}s"
    except Exception as exc:  # noqa: BLE001 - one line in the report, the sweep goes on
        steps["plugin+doctor"] = "FAILED"
        problems.append(f"entry point: {exc}")

    applied = sorted(p for p, s in want.items() if s == "applied")
    t0 = time.monotonic()
    try:
        toggle = _result_line(_run([py, "ci/sweep/probe.py", "toggle", engine],
                                   env={"VLM_FASTPATH": "0"}))
        if "error" in toggle:
            raise RuntimeError(toggle["traceback"])
        off = {k: v[0] for k, v in toggle["status_off"].items()}
        if set(off.values()) != {"disabled"}:
            problems.append(f"VLM_FASTPATH=0: not all disabled: {off}")
        if toggle["ours_while_off"]:
            problems.append(f"VLM_FASTPATH=0: engine objects are ours: {toggle['ours_while_off']}")
        problems += _diff("apply()", {k: v[0] for k, v in toggle["status_on"].items()}, want)
        if bool(toggle["changed"]) != bool(applied):
            problems.append(f"apply(): changed {toggle['changed']} with applied {applied}")
        for key in ("changed_by_second_apply", "not_restored", "left_behind"):
            if toggle[key]:
                problems.append(f"{key}: {toggle[key]}")
        steps["toggle"] = (f"ok {time.monotonic() - t0:.0f}s ({len(toggle['changed'])} "
                           "replaced, all restored)")
    except Exception as exc:  # noqa: BLE001
        steps["toggle"] = "FAILED"
        problems.append(f"toggle: {exc}")

    verified: dict[str, str] = {}
    codes = {}
    if "doctor" in plugin:
        env_dir = envs.spec(name).directory()
        for entry in plugin["doctor"]["patches"]:
            if entry["name"] in applied:
                codes[entry["name"]] = modules_hash(env_dir, entry["modules"])
    owners = {p: _claim(engine, p, codes[p], release) for p in applied if p in codes}
    own = [p for p in applied if owners.get(p, release) == release]
    same = sorted({owners[p] for p in applied if owners.get(p, release) != release})
    gaps: list[str] = []
    if run_behaviour:
        nodes = behaviour.tests_for(engine, own, release)
        gaps = behaviour.gaps_for(engine, own, release)
        if nodes:
            proc = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodes])
            tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            steps["behaviour"] = tail
            if proc.returncode:
                problems.append(f"behaviour tests failed:\n{proc.stdout[-3000:]}")
        else:
            steps["behaviour"] = "none to run"
        if gaps:
            steps["behaviour"] += f" (NOT RUN, harness gap: {', '.join(gaps)})"
        if same:
            steps["behaviour"] += (f" ({len(applied) - len(own)} patches: same patched code "
                                   f"as {', '.join(same)})")
    else:
        steps["behaviour"] = "full suite (anchor)"
    if not problems:
        gapped = {p for p in own if behaviour.gaps_for(engine, [p], release)}
        verified = {p: codes[p] for p in own if p in codes and p not in gapped}
    steps["time"] = f"{time.monotonic() - start:.0f}s"
    return {"ok": not problems, "problems": problems, "steps": steps, "applied": applied,
            "verified": verified}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=coverage.ENGINES, action="append")
    parser.add_argument("--release", action="append")
    parser.add_argument("--no-page", action="store_true", help="do not rewrite ci/COVERAGE.md")
    parser.add_argument("--jobs", type=int, default=0, help="releases at once (default: cores)")
    args = parser.parse_args(argv)
    force = os.environ.get("SWEEP_FORCE") == "1"
    RESULTS.mkdir(parents=True, exist_ok=True)
    skipped = coverage.not_installable()
    failures, total, start = 0, 0, time.monotonic()
    todo = []
    for engine in args.engine or coverage.ENGINES:
        for release, rows in coverage.load(engine).items():
            if args.release and release not in args.release:
                continue
            total += 1
            label = f"sweep {engine} {release:<13}"
            if (engine, release) in skipped:
                print(f"{label} static check only (not installable on CPU: "
                      f"{skipped[(engine, release)]['error'][:80]})", flush=True)
                continue
            if not pin_file(engine, release).exists():
                print(f"{label} FAILED: no pin file {pin_file(engine, release)} and not listed "
                      "in ci/sweep/not-installable.csv", flush=True)
                failures += 1
                continue
            key = result_key(engine, release, rows)
            cache = RESULTS / f"{engine}-{release}.json"
            if not force and cache.exists():
                kept = json.loads(cache.read_text())
                if kept.get("key") == key and kept.get("ok"):
                    for patch, code in kept.get("verified", {}).items():
                        _claim(engine, patch, code, release)
                    print(f"{label} ok (unchanged since {kept['when']}; "
                          f"{len(kept['applied'])} applied)", flush=True)
                    continue
            todo.append((engine, release, rows, key, cache, label))
    todo.sort(key=lambda job: job[1] not in coverage.ANCHORS[job[0]])  # anchors claim first
    # An engine import is one busy core: run as many releases at once as there are cores.
    jobs = args.jobs or min(len(todo), len(os.sched_getaffinity(0))) or 1
    if todo:
        print(f"sweep: {len(todo)} releases to run, {jobs} at a time", flush=True)

    def one(job: tuple) -> tuple:
        engine, release, rows, key, cache, label = job
        anchor = release in coverage.ANCHORS[engine]
        return job, sweep_release(engine, release, rows, run_behaviour=not anchor)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done in as_completed([pool.submit(one, job) for job in todo]):
            job, result = done.result()
            engine, release, rows, key, cache, label = job
            steps = " · ".join(f"{k} {v}" for k, v in result["steps"].items())
            print(f"{label} {'ok' if result['ok'] else 'FAILED'}: {steps}", flush=True)
            for problem in result["problems"]:
                print("    " + problem.replace("\n", "\n    "), flush=True)
            result.update(key=key, when=time.strftime("%Y-%m-%d %H:%M"))
            cache.write_text(json.dumps(result, indent=1))
            failures += not result["ok"]
    print(f"sweep: {total - failures}/{total} releases ok in {time.monotonic() - start:.0f} s")
    if not failures and not args.release and not args.engine and not args.no_page:
        coverage.main([])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
