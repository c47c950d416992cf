"""Shared helpers for benchmark scripts: machine/version metadata and result files.

Every script saves its results through `write_results`, so every results file carries the same
``machine`` record (format version, commit, date, load average, platform, package versions); the
script's payload (its settings, seeds and measurements) sits beside it. One file per benchmark:
a script whose modes are separate runs (CPU and GPU, two problem sets) writes each as a named
run of that file (``{"runs": {name: record}}``), replacing only that run. A file merged from
several runs' files lists them (``merged_from``), their machine records chained as diffs
(`machine_diffs`, undone by `machines_expanded`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Version of the results files' layout (``machine`` plus the script's payload); raise it when the
#: layout of ``machine`` changes. 3: every script writes through `write_results` (bench_rewrite_ir
#: and bench_structure had records of their own); ``load_average_end`` when the machine record was
#: taken at the start of the run.
FORMAT_VERSION = 3

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
    "causal-learn",
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
        "gpu": _gpu(),
    }


def _gpu() -> str | None:
    """The CUDA device's name and torch's CUDA version, when torch is loaded and sees one."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, torch {torch.__version__})"


def write_results(
    name: str | Path,
    payload: dict[str, Any],
    *,
    machine: dict[str, Any] | None = None,
    dumps: Callable[[dict[str, Any]], str] | None = None,
    run: str | None = None,
) -> Path:
    """Write ``payload`` plus machine info as JSON and return the file's path.

    Args:
        name: A file stem, written to ``benchmarks/results/<name>.json``, or a `Path`, written
            where it says.
        payload: The script's record: its settings, seeds and measurements.
        machine: A `machine_info` taken at the start of the run (its date and load average are
            the start's; the load average now is added as ``load_average_end``); taken now when
            None.
        dumps: The record's JSON text (a script with a layout of its own); `compact_json`
            when None.
        run: Write the record as this named run of the file (``{"runs": {run: record}}``),
            keeping its other runs; None: the record is the whole file.

    The file is replaced atomically: a run saving as it goes never leaves half a file.
    """
    if "machine" in payload:
        raise ValueError("payload has a 'machine' key of its own; write_results adds it")
    if machine is None:
        machine = machine_info()
    elif hasattr(os, "getloadavg"):
        machine = {**machine, "load_average_end": list(os.getloadavg())}
    record: dict[str, Any] = {"machine": machine, **payload}
    path = name if isinstance(name, Path) else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if run is not None:
        runs = read_results(path).get("runs", {}) if path.exists() else {}
        record = {"runs": {**runs, run: record}}
    text = (dumps or compact_json)(record)
    from rewrite.serialize import write_text_atomic  # the project's one atomic writer

    return write_text_atomic(path, text if text.endswith("\n") else text + "\n")


def machine_diffs(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``sources`` (a merged file's ``merged_from``: dicts with a ``machine`` record) with each
    machine record after the first cut to what differs from the one before it, nested fields
    included (mostly the load average and the date): the same machine written out 70 times made
    up a quarter of the results folder. `machines_expanded` undoes it."""
    return _chained(sources, lambda machine, before: (_diff(machine, before), machine))


def machines_expanded(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inverse of `machine_diffs`: every machine record whole again."""

    def whole(
        diff: dict[str, Any], before: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        machine = _patched(before, diff)
        return machine, machine

    return _chained(sources, whole)


_Step = Callable[[dict[str, Any], dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]


def _chained(sources: list[dict[str, Any]], step: _Step) -> list[dict[str, Any]]:
    """Copies of ``sources`` whose machine records after the first are replaced by ``step(
    machine, whole record before it)``'s first value; its second is that source's whole
    record."""
    out = [dict(s) for s in sources]
    before: dict[str, Any] | None = None
    for source in out:
        machine = source.get("machine")
        if not isinstance(machine, dict):
            continue
        if before is not None:
            source["machine"], machine = step(machine, before)
        before = machine
    return out


_REMOVED = "_removed"
"""The `_diff` key that lists the fields the older record has and the newer lacks."""


def _diff(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``new`` that differ from ``old``'s, nested dicts by field (`_REMOVED`
    lists those ``old`` has and ``new`` lacks)."""
    out: dict[str, Any] = {}
    for key, value in new.items():
        was = old.get(key)
        if isinstance(value, dict) and isinstance(was, dict):
            if sub := _diff(value, was):
                out[key] = sub
        elif key not in old or was != value:
            out[key] = value
    if removed := [k for k in old if k not in new]:
        out[_REMOVED] = removed
    return out


def _patched(old: dict[str, Any], diff: dict[str, Any]) -> dict[str, Any]:
    """``old`` with `_diff`'s ``diff`` applied."""
    out = {k: v for k, v in old.items() if k not in diff.get(_REMOVED, ())}
    for key, value in diff.items():
        if key == _REMOVED:
            continue
        out[key] = (
            _patched(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def read_results(name: str | Path, run: str | None = None) -> dict[str, Any]:
    """A results file written by `write_results` (``benchmarks/results/<name>.json`` for a
    stem), or one named ``run`` of it."""
    path = name if isinstance(name, Path) else RESULTS_DIR / f"{name}.json"
    record: dict[str, Any] = json.loads(path.read_text())
    return record if run is None else record["runs"][run]


def timeit(fn, repeat: int = 5) -> float:
    """Best wall time of ``repeat`` calls of ``fn()``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def compact_json(obj: Any, depth: int = 0, *, inline_at: int = 4) -> str:
    """The results files' JSON layout: objects and lists of objects indented down to
    ``inline_at`` levels, anything deeper (and any list of plain values) on one line without
    spaces. A record's structure stays readable in a diff while its per-trial and per-round
    values take a line each, which keeps ``benchmarks/results`` small."""
    if depth >= inline_at or not isinstance(obj, dict | list) or not obj:
        return json.dumps(obj, separators=(",", ":"), default=str)
    if isinstance(obj, list) and not any(isinstance(v, dict | list) for v in obj):
        return json.dumps(obj, separators=(",", ":"), default=str)
    pad = "  " * (depth + 1)
    if isinstance(obj, dict):
        items = [
            f"{pad}{json.dumps(str(k))}: {compact_json(v, depth + 1, inline_at=inline_at)}"
            for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    items = [f"{pad}{compact_json(v, depth + 1, inline_at=inline_at)}" for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + "  " * depth + "]"


def paired_test(mine: list[float], theirs: list[float]) -> tuple[float, float]:
    """Median over seeds of ``mine - theirs`` (paired by seed), and the two-sided Wilcoxon
    signed-rank p-value of the differences (1.0 when all are zero: identical runs)."""
    import numpy as np
    from scipy.stats import wilcoxon

    diff = [a - b for a, b in zip(mine, theirs, strict=True)]
    if not any(abs(d) > 1e-12 for d in diff):
        return 0.0, 1.0
    return float(np.median(diff)), float(wilcoxon(diff).pvalue)


def round_floats(obj: Any, digits: int = 6) -> Any:
    """`obj` with every float rounded to ``digits`` significant digits (lists, dicts and tuples
    walked): results files keep what a table can show, not the last bits of a float."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [round_floats(v, digits) for v in obj]
    return obj
