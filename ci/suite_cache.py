"""Run an engine suite, or report that it already passed with exactly these inputs.

    python3.11 ci/suite_cache.py <env name or -> <label> -- <command ...>

An engine suite takes minutes; its verdict depends only on its env and this checkout's
files. So a pass is recorded in the machine's cache, next to the envs
(``<cache>/../results/<label>.json``), under a key of everything it can depend on:

- the cached env it runs in (its directory name hashes its pin files, recipe and parent);
- every file of the checkout that git tracks or would track (``git ls-files -co
  --exclude-standard``), by content, except ``benchmarks/results/`` (benchmark output);
- the command line, the ``VLM_FASTPATH*``/``NUMBA*``/``PYTEST*``/``SGLANG*``/``VLLM*``
  variables, the machine's architecture and core count.

A run whose key matches a recorded pass prints that pass (when, how long) and exits 0; a
fresh clone of the same commit on the same machine therefore re-runs nothing it has already
passed, and any changed file, pin or setting re-runs every suite it could affect. Failures
are never recorded. ``SUITE_FORCE=1`` runs regardless. Without git the suite just runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import envs  # noqa: E402

ROOT = envs.ROOT
RESULTS = envs.cache_root().parent / "results"
IGNORED_PREFIXES = ("benchmarks/results/",)
VARIABLE_PREFIXES = ("VLM_FASTPATH", "NUMBA", "PYTEST", "SGLANG", "VLLM")


def checkout_hash() -> str | None:
    """sha256 over (path, content) of the checkout's files; None without git."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
            capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        if name.startswith(IGNORED_PREFIXES):
            continue
        path = ROOT / name
        if path.is_file():  # a deleted but still tracked file is simply absent
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def suite_key(env: str, command: list[str]) -> str | None:
    files = checkout_hash()
    if files is None:
        return None
    digest = hashlib.sha256()
    env_dir = envs.spec(env).directory().name if env != "-" else "-"
    variables = sorted((k, v) for k, v in os.environ.items() if k.startswith(VARIABLE_PREFIXES))
    for part in (env_dir, files, json.dumps(command), json.dumps(variables),
                 platform.machine(), str(len(os.sched_getaffinity(0)))):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:24]


def record_path(label: str) -> Path:
    return RESULTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", label) + ".json")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    env, label, command = argv[0], argv[1], argv[3:]
    key = suite_key(env, command)
    record = record_path(label)
    if key and os.environ.get("SUITE_FORCE") != "1" and record.exists():
        try:
            kept = json.loads(record.read_text())
        except (OSError, ValueError):
            kept = {}
        if kept.get("key") == key:
            print(f"== {label}: passed {kept['when']} in {kept['seconds']} s with these exact "
                  f"inputs (key {key}); not re-run (SUITE_FORCE=1 re-runs)", flush=True)
            return 0
    start = time.monotonic()
    rc = subprocess.call(command, cwd=ROOT)
    seconds = round(time.monotonic() - start)
    # one line per suite run: a cold `make test`'s phases are read off these
    print(f"== {label}: {'passed' if rc == 0 else f'FAILED (rc {rc})'} in {seconds} s",
          flush=True)
    if rc == 0 and key:
        RESULTS.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "when": time.strftime("%Y-%m-%d %H:%M"),
                                   "seconds": seconds, "command": command}, indent=1))
        tmp.replace(record)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
