"""What the user reads: environment line, results table, optional JSON and PNG bar chart."""

from __future__ import annotations

import importlib
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .contenders import Absent
from .runner import Failure, Row


def _module_version(name: str) -> str | None:
    try:
        return str(importlib.import_module(name).__version__)
    except Exception:  # noqa: BLE001 - absent or broken: simply not listed
        return None


def environment() -> dict[str, Any]:
    """Versions and cores: the numbers mean little without them."""
    import numpy as np
    import PIL
    import torch

    import vlm_fastpath
    from vlm_fastpath.imaging.resize_pool import available_cpus
    from vlm_fastpath.kimi_integration.patchify_kernel import backend_info

    info: dict[str, Any] = {
        "vlm_fastpath": _package_version(),
        "package_dir": str(Path(vlm_fastpath.__file__).resolve().parent),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": available_cpus(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "kernel": backend_info(),
    }
    for name in ("vllm", "transformers", "torchvision"):
        version = _module_version(name) if _spec_exists(name) else None
        if version:
            info[name] = version
    return info


def _spec_exists(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vlm-fastpath")
    except PackageNotFoundError:
        return "unknown (not installed)"


def format_environment(env: dict[str, Any]) -> str:
    parts = [f"vlm-fastpath {env['vlm_fastpath']} ({env['package_dir']})"]
    parts.append(f"python {env['python']}, {env['cores']} cores, torch {env['torch']}")
    parts.append(f"pillow {env['pillow']}, numpy {env['numpy']}")
    kernel = env.get("kernel")
    if isinstance(kernel, dict) and kernel:
        parts.append("kernel " + ", ".join(f"{k}={v}" for k, v in kernel.items()))
    engines = [f"{n} {env[n]}" for n in ("vllm", "transformers", "torchvision") if n in env]
    parts.append(", ".join(engines) if engines else "no engine installed")
    return "\n".join(parts)


def _fmt_ms(ms: float) -> str:
    return f"{ms:.1f}" if ms < 10_000 else f"{ms:.0f}"


def format_table(rows: Sequence[Row]) -> str:
    """Fixed-width table; speedup is vs the engine's processor of the same model and workload."""
    header = ["model", "workload", "contender", "first ms", "median ms", "img/s", "speedup",
              "exact", "engine uses it"]
    body = []
    for row in rows:
        speedup = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
        exact = "(ref)" if row.ours else ("yes" if row.exact else "NO")
        body.append([row.family, row.workload, row.contender, _fmt_ms(row.first_ms),
                     _fmt_ms(row.median_ms), f"{row.images_per_s:.2f}", speedup, exact,
                     row.engine_uses])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    left = {0, 1, 2}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(cells) for cells in body]
    return "\n".join(out)


def format_notes(
    absent: Sequence[Absent], failures: Sequence[Failure], uses: Mapping[str, Any] | None = None
) -> str:
    lines = [f"engine uses ours ({family}): {use.mark}: {use.detail}"
             for family, use in (uses or {}).items()]
    lines += [f"absent: {a.family} {a.name}: {a.reason}" for a in absent]
    lines += [f"failed: {f.family} {f.contender} on {f.workload}: {f.error}" for f in failures]
    return "\n".join(lines)


def write_json(
    path: Path,
    env: dict[str, Any],
    settings: dict[str, Any],
    rows: Sequence[Row],
    absent: Sequence[Absent],
    failures: Sequence[Failure],
) -> Path:
    payload = {
        "environment": env,
        "settings": settings,
        "rows": [asdict(r) for r in rows],
        "absent": [asdict(a) for a in absent],
        "failures": [asdict(f) for f in failures],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def write_png(path: Path, rows: Sequence[Row], cores: int) -> Path | str:
    """A grouped bar chart of images/s; returns the path, or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; pip install matplotlib"
    groups = list(dict.fromkeys((r.family, r.workload) for r in rows))
    by_key = {(r.family, r.workload, r.contender): r for r in rows}
    names = list(dict.fromkeys(r.contender for r in rows))
    if not groups:
        return "no rows to plot"
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(groups) + 2), 4.5))
    for i, name in enumerate(names):
        xs, ys = [], []
        for g, (family, workload) in enumerate(groups):
            row = by_key.get((family, workload, name))
            if row is not None:
                xs.append(g + i * width)
                ys.append(row.images_per_s)
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(
        [g + width * (len(names) - 1) / 2 for g in range(len(groups))],
        [f"{family}\n{workload}" for family, workload in groups],
    )
    ax.set_ylabel("images/s (higher is better)")
    ax.set_title(f"vlm-fastpath bench: image preprocessing, {cores} cores")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def relative(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # pragma: no cover - other drive on Windows
        return str(path)
