"""Shared helpers for benchmark scripts: machine/version metadata and result files."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"

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


def machine_info() -> dict[str, Any]:
    """Machine, interpreter and package versions, for stamping benchmark results."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
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
