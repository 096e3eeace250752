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

Releases on the registry without a record (ci/sweep/discover.py; vLLM from 0.15, SGLang from
0.5.12) are run too, printed as NEW with every patch's status and reason: a vLLM patch release
of a tested minor is compared file by file first (identical files: that release's statuses, no
env); otherwise an env from a recipe generated out of the wheel's metadata, steps 2-4 without
expected statuses. A new release fails the sweep only by a crash, an exception escaping into the
engine (import errors, VLM_FASTPATH=0/apply/revert) or a failing behaviour test of a patch that
applies (other pixels than the engine's own); a patch standing aside there is a finding, and an
env that cannot be built is printed, not failed. After a full clean pass the sweep rewrites
ci/COVERAGE.md and vlm_fastpath/patches/core/verified.json (each recorded release's applied and
verified patches with their code fingerprints, shipped in the wheel), each only if it changed.

    python3.11 ci/sweep/run.py [--engine vllm|sglang] [--release 0.19.1 ...] [--no-page]
                               [--hide 0.33.0 ...]   (treat a recorded release as new)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
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
import discover  # noqa: E402
import envs  # noqa: E402
import static_vllm  # noqa: E402
from probe import IMPORT_CHECKS  # noqa: E402


def _fingerprint_module():
    """vlm_fastpath/patches/core/fingerprint.py by path: the package's one home for the hash, read
    without importing vlm_fastpath (whose import needs numpy; this runs on a bare python)."""
    path = ROOT / "vlm_fastpath/patches/core/fingerprint.py"
    spec = importlib.util.spec_from_file_location("_vlm_fastpath_fingerprint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fingerprint = _fingerprint_module()
RESULTS = envs.cache_root().parent / "sweep"
WHEELS = RESULTS / "wheels"
VERIFIED = fingerprint.VERIFIED_FILE
TIMEOUT = 600


# Behaviour tests run once per (patch, source of the engine modules it patches): a release whose
# patched modules are byte-identical to a release that already ran them (in this run, or in a
# kept result) reuses that verdict and says so. Anchors' full suites count too.
CLAIMS: dict[tuple[str, str, str], str] = {}
CLAIMS_LOCK = threading.Lock()


def _sites(env_dir: Path) -> list[Path]:
    """A cached env's site-packages, then its parent's (the base), as its python sees them."""
    site = env_dir / envs.SITE
    sites = [site]
    pth = site / "00-vlm-fastpath-base.pth"
    if pth.exists():
        sites += [Path(m) for m in re.findall(r"addsitedir\('([^']+)'\)", pth.read_text())]
    return sites


def _source(sites: list[Path], name: str) -> bytes | None:
    """The source bytes of module ``name`` as the import system would find it (a package's
    ``__init__.py`` before a same-named module), or None when absent."""
    for site in sites:
        base = site.joinpath(*name.split("."))
        for path in (base / "__init__.py", base.with_suffix(".py")):
            if path.is_file():
                return path.read_bytes()
    return None


def modules_hash(env_dir: Path, modules: list[str]) -> str:
    """The fingerprint ``vlm_fastpath.patches.core.fingerprint.code_fingerprint`` computes for
    ``modules`` inside that env (same function, so the shipped verified.json matches it)."""
    sites = _sites(env_dir)
    return fingerprint.fingerprint_files((name, _source(sites, name)) for name in modules)


def _dist_version(env_dir: Path, dist: str) -> str:
    """The version of an installed distribution in the env (or its base), '' when absent."""
    for site in _sites(env_dir):
        found = sorted(site.glob(f"{dist}-*.dist-info"))
        if found:
            return found[0].name[len(dist) + 1:].removesuffix(".dist-info")
    return ""


def _claim(engine: str, patch: str, code: str, release: str) -> str:
    """The release that verifies (patch, code): this one unless another got there first.
    ``code`` is the patched modules' fingerprint with the env's transformers version (the
    processors the Qwen and Kimi tests compare against come from it)."""
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
    deps += list((ROOT / "fixtures").rglob("*.py"))
    digest = hashlib.sha256()
    digest.update(envs.spec(f"{engine}-{release}").directory().name.encode())
    digest.update(envs._sources_hash(data=False).encode())  # verified.json is our output
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


def _imports_fail_without_us(py: str, engine: str) -> bool:
    """The env's import check fails with vlm-fastpath off too: the env, not us (new releases,
    whose recipe was generated)."""
    proc = _run([py, *IMPORT_CHECKS[engine]], env={"VLM_FASTPATH": "0"})
    return proc.returncode != 0


def sweep_release(engine: str, release: str, rows: dict, run_behaviour: bool,
                  new: bool = False) -> dict:
    """Steps 1-4 for one release; returns {"ok", "problems", "steps", "applied", ...}.

    ``new``: a release without a table (found on the registry): nothing is compared with
    expected statuses; the plugin step's statuses are what apply() must agree with, and the
    behaviour tests of the patches that apply decide. A patch that stands aside is a finding."""
    steps: dict[str, str] = {}
    problems: list[str] = []
    name = f"{engine}-{release}"
    start = time.monotonic()
    try:
        here = envs.overlay(name)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        return {"ok": False, "problems": [f"env: {exc}"], "steps": {"env": "failed"},
                "applied": [], "statuses": {}, "new": new, "env_failed": True}
    py = str(here / "bin/python")
    steps["env"] = f"{time.monotonic() - start:.0f}s"
    want = {p: s for p, (s, _) in rows.items()}
    statuses: dict[str, list[str]] = {}

    t0 = time.monotonic()
    plugin: dict = {}
    try:
        plugin = _result_line(_run([py, "ci/sweep/probe.py", "plugin", engine]))
        imports = plugin.get("imports", {"rc": 1, "output": "no import check result"})
        steps["imports"] = "ok" if imports["rc"] == 0 else "FAILED"
        if imports["rc"] and new and _imports_fail_without_us(py, engine):
            steps["imports"] = "FAILED with VLM_FASTPATH=0 too"
            steps["time"] = f"{time.monotonic() - start:.0f}s"
            return {"ok": True, "problems": [], "steps": steps, "applied": [], "statuses": {},
                    "new": True, "env_failed": True,
                    "findings": [f"the env lacks what the engine imports (a recipe to fix, not "
                                 f"a fault of ours): {imports['output'].strip()}"]}
        if imports["rc"]:
            problems.append(f"imports: {imports['output']}")
        if "error" in plugin:
            raise RuntimeError(plugin["traceback"])
        statuses = plugin["status"]
        got = {k: v[0] for k, v in statuses.items()}
        if new:
            want = dict(got)  # no table: the other steps are held to what the plugin found
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
    transformers = ""
    if "doctor" in plugin:
        env_dir = envs.spec(name).directory()
        for entry in plugin["doctor"]["patches"]:
            if entry["name"] in applied:
                codes[entry["name"]] = modules_hash(env_dir, entry["modules"])
        transformers = _dist_version(env_dir, "transformers")
    claims = {p: f"{codes[p]}|{transformers}" for p in applied if p in codes}
    owners = {p: _claim(engine, p, claims[p], release) for p in claims}
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
    gapped = sorted(p for p in applied if behaviour.gaps_for(engine, [p], release))
    if not problems:
        verified = {p: claims[p] for p in own if p in claims and p not in gapped}
    steps["time"] = f"{time.monotonic() - start:.0f}s"
    return {"ok": not problems, "problems": problems, "steps": steps, "applied": applied,
            "verified": verified, "fingerprints": codes, "gapped": gapped,
            "statuses": statuses, "new": new}


def same_files_result(release: str, tested: str, files: list[str], rows: dict) -> dict:
    """A new vLLM patch release whose patched files all equal its minor's tested release's:
    that release's statuses hold for it, no env is built (as vllm-patch-releases.md does)."""
    statuses = {p: [s, r] for p, (s, r) in rows.items()}
    return {"ok": True, "problems": [], "new": True, "same_as": tested,
            "applied": sorted(p for p, (s, _) in statuses.items() if s == "applied"),
            "statuses": statuses, "verified": {},
            "steps": {"files": f"identical to {tested} in all {len(files)} files the patches "
                      f"touch, so {tested}'s statuses (no env built)"}}


def run_new(engine: str, release: str, table: dict, hide: set[str], force: bool) -> dict:
    """A release found on the registry and not recorded: its wheel, the file-by-file shortcut
    for a vLLM patch release of a tested minor, else a generated recipe and a full run."""
    start = time.monotonic()
    try:
        wheel = discover.download_wheel(engine, release, WHEELS)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"ok": True, "new": True, "env_failed": True, "problems": [], "applied": [],
                "statuses": {}, "steps": {"wheel": "not downloaded"},
                "findings": [f"wheel: {exc}"]}
    note = ""
    if engine == "vllm":
        tested_all = [r for r in table if r not in hide and pin_file(engine, r).exists()]
        tested = discover.tested_release_of_minor(release, tested_all)
        try:
            site = envs.build(f"{engine}-{tested}") / envs.SITE if tested else None
        except RuntimeError as exc:  # its env is the recorded release's failure, not this one's
            site, note = None, f"not compared with {tested} (its env: {str(exc)[:80]})"
        if site is not None:
            files, differ = static_vllm.compare_files(static_vllm.Release(wheel),
                                                      static_vllm.Release(site))
            if not differ:
                return same_files_result(release, tested, files, table[tested])
            note = (f"{len(differ)} of {len(files)} patched files differ from {tested} "
                    f"({', '.join(d.rsplit('.', 1)[1] for d in differ)})")
    name = f"{engine}-{release}"
    envs.PREFER_GENERATED.add(name)  # a hidden release is run from its generated recipe too
    discover.write_pins(engine, release, wheel, envs.generated_pins() / f"{name}.txt",
                        lambda package: discover.available(package)[0])
    key = result_key(engine, release, {})
    cache = RESULTS / f"{name}.new.json"
    if not force and cache.exists():
        kept = json.loads(cache.read_text())
        if kept.get("key") == key and kept.get("ok"):
            kept["kept"] = True
            return kept
    result = sweep_release(engine, release, {}, run_behaviour=True, new=True)
    if note:
        result["steps"] = {"files": note, **result["steps"]}
    result["steps"]["time"] = f"{time.monotonic() - start:.0f}s"
    if result.get("env_failed") and "findings" not in result:  # an install quirk, not ours
        result["ok"] = True
        result["findings"] = result.pop("problems")
        result["problems"] = []
        result["steps"]["env"] = "NOT BUILT (a finding: fix the recipe or record the release)"
    result.update(key=key, when=time.strftime("%Y-%m-%d %H:%M"))
    cache.write_text(json.dumps(result, indent=1))
    return result


def new_lines(label: str, result: dict) -> list[str]:
    """How a new release is printed: its line, then every patch's status and reason."""
    if result.get("kept"):
        head = (f"{label} NEW ok (unchanged since {result['when']}; "
                + ("its env could not be built" if result.get("env_failed") else
                   f"{len(result['applied'])} applied") + ")")
    else:
        steps = " · ".join(f"{k} {v}" for k, v in result["steps"].items())
        head = f"{label} NEW {'ok' if result['ok'] else 'FAILED'}: {steps}"
    lines = [head]
    for patch, (status, reason) in sorted(result.get("statuses", {}).items()):
        lines.append(f"    {patch}: {status} ({reason})")
    lines += ["    finding: " + f.replace("\n", "\n    ") for f in result.get("findings", [])]
    lines += ["    " + p.replace("\n", "\n    ") for p in result["problems"]]
    return lines


def verified_data(results: dict[tuple[str, str], dict]) -> dict:
    """``{engine: {patch: {release: fingerprint}}}`` from the kept results of recorded
    releases: every applied patch with a fingerprint whose behaviour was verified (by its own
    tests, by the same code's verdict on another release, or by an anchor's full suite)."""
    data: dict[str, dict[str, dict[str, str]]] = {}
    order = sorted(results, key=lambda k: (k[0], discover.release_key(k[1])))
    for engine, release in order:
        result = results[(engine, release)]
        if not result.get("ok") or result.get("new"):
            continue
        for patch in result.get("applied", []):
            code = result.get("fingerprints", {}).get(patch)
            if code and patch not in result.get("gapped", []):
                data.setdefault(engine, {}).setdefault(patch, {})[release] = code
    return {e: dict(sorted(p.items())) for e, p in sorted(data.items())}


def write_verified(data: dict, path: Path | None = None) -> bool:
    """Rewrite verified.json only when its content changes (the wheel is rebuilt when it
    does, so an unchanged pass must not touch it). Returns whether it was written."""
    path = path or VERIFIED
    text = json.dumps(data, indent=1) + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def find_new(engine: str, only: list[str] | None, hide: set[str]) -> list[str]:
    """The engine's releases on the registry without a record (and the hidden ones)."""
    registry, why = discover.registry_releases(engine)
    if registry is None:
        print(f"sweep: {engine}: could not read the registry's releases ({why}); "
              "new releases not looked for", flush=True)
        registry = []
    found = discover.unrecorded(engine, registry, hide)
    return [r for r in found if not only or r in only]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=coverage.ENGINES, action="append")
    parser.add_argument("--release", action="append")
    parser.add_argument("--no-page", action="store_true",
                        help="do not rewrite ci/COVERAGE.md nor "
                        "vlm_fastpath/patches/core/verified.json")
    parser.add_argument("--jobs", type=int, default=0, help="releases at once (default: cores)")
    parser.add_argument("--hide", action="append", default=[],
                        help="treat this recorded release as new (also SWEEP_HIDE=a,b)")
    args = parser.parse_args(argv)
    force = os.environ.get("SWEEP_FORCE") == "1"
    hide = discover.hidden(args.hide)
    RESULTS.mkdir(parents=True, exist_ok=True)
    skipped = coverage.not_installable()
    failures, total, start = 0, 0, time.monotonic()
    todo = []
    tables = {}
    kept_results: dict[tuple[str, str], dict] = {}
    for engine in args.engine or coverage.ENGINES:
        tables[engine] = coverage.load(engine)
        for release, rows in tables[engine].items():
            if release in hide or (args.release and release not in args.release):
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
                    kept_results[(engine, release)] = kept
                    print(f"{label} ok (unchanged since {kept['when']}; "
                          f"{len(kept['applied'])} applied)", flush=True)
                    continue
            todo.append((engine, release, rows, key, cache, label, False))
    t0 = time.monotonic()
    new = {engine: find_new(engine, args.release, hide) for engine in tables}
    found = [f"{e} {r}" for e, rs in new.items() for r in rs]
    print(f"sweep: registry read in {time.monotonic() - t0:.1f} s; "
          f"{'NEW (not recorded): ' + ', '.join(found) if found else 'no new releases'}",
          flush=True)
    for engine, releases in new.items():
        for release in releases:
            total += 1
            todo.append((engine, release, {}, "", None, f"sweep {engine} {release:<13}", True))
    # anchors claim first, new releases last (they reuse verdicts of the same code)
    todo.sort(key=lambda job: (job[6], job[1] not in coverage.ANCHORS[job[0]]))
    # An engine import is one busy core: run as many releases at once as there are cores.
    jobs = args.jobs or min(len(todo), len(os.sched_getaffinity(0))) or 1
    if todo:
        print(f"sweep: {len(todo)} releases to run, {jobs} at a time", flush=True)

    def one(job: tuple) -> tuple:
        engine, release, rows, key, cache, label, is_new = job
        if is_new:
            return job, run_new(engine, release, tables[engine], hide, force)
        anchor = release in coverage.ANCHORS[engine]
        return job, sweep_release(engine, release, rows, run_behaviour=not anchor)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done in as_completed([pool.submit(one, job) for job in todo]):
            job, result = done.result()
            engine, release, rows, key, cache, label, is_new = job
            failures += not result["ok"]
            if is_new:
                print("\n".join(new_lines(label, result)), flush=True)
                continue
            steps = " · ".join(f"{k} {v}" for k, v in result["steps"].items())
            print(f"{label} {'ok' if result['ok'] else 'FAILED'}: {steps}", flush=True)
            for problem in result["problems"]:
                print("    " + problem.replace("\n", "\n    "), flush=True)
            result.update(key=key, when=time.strftime("%Y-%m-%d %H:%M"))
            cache.write_text(json.dumps(result, indent=1))
            kept_results[(engine, release)] = result
    print(f"sweep: {total - failures}/{total} releases ok in {time.monotonic() - start:.0f} s"
          + (f"; NEW, record them (ci/README.md, 'Add a version'): {', '.join(found)}"
             if found else ""))
    full = not (failures or args.release or args.engine or args.no_page or hide)
    if full:
        coverage.main([])
        if write_verified(verified_data(kept_results)):
            print(f"wrote {os.path.relpath(VERIFIED, ROOT)} (commit it: it ships in the wheel)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
