"""STENSO's suite read from a checkout of its artifact: the 33 programs, their sizes, its figures.

STENSO (CGO 2026; artifact ``danielbonkowsky/STENSO-Artifact``) rewrites 33 ``jax.numpy``
programs, 21 mined from GitHub (``github_1`` to ``github_21``) and 12 synthetic (``synth_1`` to
``synth_12``), each a file ``stenso/eval/benchmarks/<name>.py`` defining ``kernel`` and
``arg_ranks``. The artifact carries no license, so rewrite-tuner ships none of its programs: this
module reads them from a checkout the user provides (``--stenso PATH`` or ``$STENSO_ARTIFACT``),
with `rewrite.arrays.load_program`, as written.

Sizes and inputs follow its ``stenso/eval/run_performance.py``: every dim of every array is 1000
when all arguments have rank below 2, else 200; values uniform in ``[0, 1)``, float32. A rank-0
argument is a 0-d tensor here (the artifact's PyTorch run passes a Python float). STENSO's
rewrites of six programs (``exp(log(A + B)) -> A + B``, ``x / sqrt(x) -> sqrt(x)``, ...) hold for
positive inputs only, which its inputs are (it checks them with ``allclose`` on such inputs);
here the programs are imported with that promise stated (`DOMAIN`, read by the rules of
`rewrite.rules.domain`), and the inputs keep it: an element drawn as exactly 0 (probability
``2**-24``) is raised to ``2**-24``.

Its published times, ``stenso/eval/performance_results/<cpu>.csv`` (``Benchmark, Compiler,
OriginalTime, OptimizedTime``), give per program and compiler the original's and the rewritten
program's median time; the ``PyTorch`` rows are the program compiled by Inductor before and
after STENSO's rewrite. `published` reads them; `summary` gives the figures the paper's claims
rest on (geometric mean of Original / Optimized, programs above 1.1x and below 0.95x, maximum).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewrite.arrays import ArrayProgram, load_program, program_inputs

__all__ = [
    "CPUS",
    "DOMAIN",
    "PROGRAMS",
    "StensoProgram",
    "artifact_path",
    "load_suite",
    "published",
    "summary",
]

#: The suite, in the artifact's order.
PROGRAMS: tuple[str, ...] = tuple(
    [f"github_{i}" for i in range(1, 22)] + [f"synth_{i}" for i in range(1, 13)]
)
#: The CPUs of the published results: the file stem and a short name.
CPUS: dict[str, str] = {
    "AMD_Ryzen_9_7950X": "ryzen",
    "Intel_Core_i7-8700K": "i7",
    "UnknownVendor_Apple_M3_Pro": "m3",
}
#: The promise about every program's inputs (`rewrite.arrays.import_program`'s ``domains``).
DOMAIN = "positive"
_HINT = (
    "rewrite-tuner does not ship STENSO's programs (its artifact has no license). Fix: clone "
    "https://github.com/danielbonkowsky/STENSO-Artifact and pass --stenso <checkout> (or set "
    "STENSO_ARTIFACT=<checkout>)."
)


@dataclass(frozen=True)
class StensoProgram:
    """One program of the suite with its benchmark inputs.

    Attributes:
        program: The loaded program (`rewrite.arrays.ArrayProgram`).
        size: The size of every dim (1000 or 200).
    """

    program: ArrayProgram
    size: int

    @property
    def name(self) -> str:
        return self.program.name

    def inputs(self, seed: int = 0) -> list[Any]:
        """The benchmark inputs (seeded; uniform in ``[2**-24, 1)``, float32: `DOMAIN`)."""
        ranks = self.program.arg_ranks or ()
        return [x.clamp_min(2.0**-24) for x in program_inputs(ranks, self.size, seed)]


def artifact_path(path: str | os.PathLike[str] | None) -> Path:
    """The checkout to read: ``path``, else ``$STENSO_ARTIFACT``.

    Raises:
        FileNotFoundError: If neither names a checkout holding ``stenso/eval/benchmarks``.
    """
    given = path or os.environ.get("STENSO_ARTIFACT")
    if not given:
        raise FileNotFoundError(f"no STENSO checkout given. {_HINT}")
    root = Path(given).expanduser()
    if not (root / "stenso" / "eval" / "benchmarks").is_dir():
        raise FileNotFoundError(
            f"{str(root)!r} holds no stenso/eval/benchmarks folder, so it is not a checkout of "
            f"STENSO-Artifact. {_HINT}"
        )
    return root


def load_suite(root: Path, names: Sequence[str] = PROGRAMS) -> list[StensoProgram]:
    """The programs ``names`` of the checkout ``root``, loaded as written, with their sizes."""
    out = []
    for name in names:
        prog = load_program(root / "stenso" / "eval" / "benchmarks" / f"{name}.py")
        ranks = prog.arg_ranks or ()
        out.append(StensoProgram(prog, 1000 if all(r < 2 for r in ranks) else 200))
    return out


def published(root: Path, compiler: str = "PyTorch") -> dict[str, dict[str, float]]:
    """CPU short name -> program -> STENSO's published speedup (Original / Optimized time) for
    ``compiler``, from every results file of the checkout."""
    out: dict[str, dict[str, float]] = {}
    for stem, short in CPUS.items():
        path = root / "stenso" / "eval" / "performance_results" / f"{stem}.csv"
        if not path.exists():
            continue
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if r["Compiler"] == compiler]
        out[short] = {
            r["Benchmark"]: float(r["OriginalTime"]) / float(r["OptimizedTime"]) for r in rows
        }
    return out


def summary(ratios: dict[str, float]) -> dict[str, Any]:
    """Geometric mean, programs above 1.1x and below 0.95x, the maximum (and its program)."""
    vals = list(ratios.values())
    top = max(ratios, key=lambda k: ratios[k])
    return {
        "programs": len(vals),
        "geomean": math.exp(sum(math.log(v) for v in vals) / len(vals)),
        "above_1.1": sum(v > 1.1 for v in vals),
        "below_0.95": sum(v < 0.95 for v in vals),
        "max": ratios[top],
        "max_program": top,
    }
