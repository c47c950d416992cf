"""Shared helpers for benchmark scripts: machine/version metadata and result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Version of the results files' layout (``machine`` plus the script's payload); raise it when the
#: layout of ``machine`` changes.
FORMAT_VERSION = 2

_PACKAGES = (
    "rewrite-tuner",
    "torch",
    "botorch",
    "gpytorch",
    "numpy",
    "scipy",
    "ax-platform",
    "optuna",
    "transformers",
    "z3-solver",
)


def _commit() -> str | None:
    """The checkout's commit (with ``+dirty`` for uncommitted changes), or None outside git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_info() -> dict[str, Any]:
    """Machine, interpreter, package versions, commit and load average, for stamping benchmark
    results (the machine may be shared: compare ratios within one file)."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "format_version": FORMAT_VERSION,
        "commit": _commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": versions,
    }


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` plus machine info as JSON to ``benchmarks/results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"machine": machine_info(), **payload}, indent=2, default=str))
    os.replace(tmp, path)
    return path


def timeit(fn, repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls of ``fn()``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
