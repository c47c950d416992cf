"""Run hand-back cases under ``torchrun`` from Python, and compare them with one process.

`run_cases` starts ``python -m torch.distributed.run`` on a free port with
``rewrite.plans.harness`` as the program, waits at most ``timeout`` seconds (then kills the whole
process group it started), and on failure raises `LaunchError` with the ranks' stderr.
`compare_case` checks one case's rank results against `reference_step`.

Tolerances (fp32 throughout, dropout off):

- outputs: ``|a - b| <= 1e-5``: the same sums in another order (sharded matmuls, all-reduces)
  differ by a few ulps of values of order one (measured: at most 5e-7);
- gradients: ``|a - b| <= 1e-6 + 1e-4 * max|g|`` per tensor (measured: at most 1e-7 absolute);
  relative-only would fail on gradients that are zero in exact arithmetic (attention key
  biases: softmax ignores a shift), which come out as noise of order 1e-8;
- parameters after one AdamW step: ``|a - b| <= 0.05 * lr``. The first AdamW step moves each
  weight by about ``lr * g / (|g| + eps)``, so it turns the 1e-8 noise in those zero gradients
  into differences up to a few percent of ``lr`` (measured: 1.4% on GPT-NeoX), while what the
  check must catch, a skipped or wrong-signed update, moves a weight by ``lr`` to ``2 lr``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewrite.errors import RewriteError
from rewrite.plans.harness import StepResult, build_workload, reference_step

__all__ = [
    "LaunchError",
    "Mismatch",
    "Tolerance",
    "compare_case",
    "run_cases",
    "step_errors",
    "torchrun",
]

_ROOT = Path(__file__).resolve().parents[2]


class LaunchError(RewriteError, RuntimeError):
    """A ``torchrun`` launch failed or timed out; the message carries the ranks' stderr."""


@dataclass(frozen=True)
class Tolerance:
    """How close a distributed step must be to the single-process one (see the module doc)."""

    output: float = 1e-5
    grad_atol: float = 1e-6
    grad_rtol: float = 1e-4
    param_lr_fraction: float = 0.05


@dataclass(frozen=True)
class Mismatch:
    """The largest differences found for one case (all zero when the case ran exactly)."""

    output: float
    grad: float  # the worst |a - b| / (atol + rtol * max|g|); <= 1 passes
    param: float  # the worst |a - b| / (fraction * lr); <= 1 passes
    problems: tuple[str, ...]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_lines(text: str, limit: int = 120) -> str:
    lines = text.splitlines()
    ranked = [ln for ln in lines if ln.startswith("[rank")] or lines
    return "\n".join(ranked[-limit:])


def torchrun(args: list[str], nproc: int, *, timeout: float = 300.0) -> str:
    """Run ``python -m torch.distributed.run --nproc_per_node nproc ARGS`` on a free port.

    Args:
        args: What follows torchrun's own options, e.g. ``["-m", "rewrite.plans.run", ...]``.
        nproc: Ranks (CPU, gloo).
        timeout: Seconds before the whole process group started here is killed.

    Returns:
        The ranks' standard output.

    Raises:
        LaunchError: If torchrun fails or times out, with the ranks' stderr.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        *args,
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise LaunchError(
            f"torchrun with {nproc} ranks ran past {timeout:.0f} s and was killed; the ranks "
            f"said:\n{_rank_lines(stderr)}"
        ) from None
    if proc.returncode != 0:
        raise LaunchError(
            f"torchrun with {nproc} ranks failed (exit {proc.returncode}) after "
            f"{time.monotonic() - start:.0f} s; the ranks said:\n{_rank_lines(stderr)}\n"
            f"{stdout[-2000:]}"
        )
    return stdout


def run_cases(
    cases: list[dict[str, Any]], nproc: int, out_dir: Path, *, timeout: float = 300.0
) -> list[list[dict[str, Any]]]:
    """Run ``cases`` on ``nproc`` CPU ranks (gloo); return each rank's list of case results.

    Args:
        cases: Case documents for `rewrite.plans.harness.main` (each with a unique ``id``).
        nproc: Ranks; every case's mesh must span exactly this many.
        out_dir: Where the ranks write their results (created).
        timeout: Seconds before the launch is killed.

    Raises:
        LaunchError: If torchrun fails or times out, with the ranks' stderr.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cases.json").write_text(json.dumps(cases))
    args = ["-m", "rewrite.plans.harness", str(out_dir / "cases.json"), str(out_dir)]
    torchrun(args, nproc, timeout=timeout)
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(nproc)]


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def step_errors(
    reference: StepResult,
    grads: Mapping[str, torch.Tensor | None],
    params: Mapping[str, torch.Tensor],
    lr: float,
    tol: Tolerance,
    problems: list[str],
    *,
    every_param: bool,
) -> tuple[float, float]:
    """The worst gradient and parameter differences as fractions of their tolerances.

    Args:
        reference: The single-process step.
        grads: Full gradients by name (None: no gradient), in the model's layout.
        params: Full parameters after the step, by name.
        lr: The step's learning rate.
        tol: The tolerances.
        problems: Where differences past the tolerances, and missing tensors, are described.
        every_param: Whether every reference parameter must be present (False: a pipeline
            rank compares the parameters it holds).
    """
    grad_worst, param_worst = 0.0, 0.0
    for name, want in reference.params.items():
        if name not in params:
            if every_param:
                problems.append(f"no rank wrote parameter {name}")
            continue
        g, got = reference.grads.get(name), grads.get(name)
        if (got is None) != (g is None):
            problems.append(f"gradient of {name} is {'missing' if got is None else 'unexpected'}")
        elif g is not None and got is not None:
            bound = tol.grad_atol + tol.grad_rtol * float(g.abs().max())
            grad_worst = max(grad_worst, float((got - g).abs().max()) / bound)
        diff = float((params[name] - want).abs().max())
        param_worst = max(param_worst, diff / (tol.param_lr_fraction * lr))
    if grad_worst > 1:
        problems.append(f"gradients differ by {grad_worst:.2f}x the tolerance")
    if param_worst > 1:
        problems.append(f"parameters after AdamW differ by {param_worst:.2f}x the tolerance")
    return grad_worst, param_worst


def compare_case(
    case: dict[str, Any],
    ranks: list[list[dict[str, Any]]],
    out_dir: Path,
    reference: StepResult | None = None,
    tol: Tolerance = Tolerance(),
) -> Mismatch:
    """Compare one case's rank results with the single-process step on the whole batch.

    Args:
        case: The case document.
        ranks: What `run_cases` returned.
        out_dir: Where the ranks wrote their tensors.
        reference: The single-process step (computed here when None).
        tol: The tolerances.
    """
    if reference is None:
        work = build_workload(
            case["model"],
            batch=case.get("batch", 4),
            seq_len=case.get("seq_len", 16),
            seed=case.get("seed", 0),
        )
        reference = reference_step(work, lr=case.get("lr", 1e-3))
    results = [next(c for c in rank if c["id"] == case["id"]) for rank in ranks]
    problems: list[str] = []
    if any("error" in r for r in results):
        return Mismatch(0.0, 0.0, 0.0, (f"refused: {results[0].get('error')}",))
    out_err = 0.0
    tensors: dict[str, torch.Tensor] = {}
    for r, res in enumerate(results):
        saved = _load(out_dir / f"{case['id']}.rank{r}.safetensors")
        local = saved.pop("output", None)  # None: a pipeline rank without the last stage
        if local is not None and reference.output is not None:
            start, stop = res["batch_slice"]
            out_err = max(out_err, float((local - reference.output[start:stop]).abs().max()))
        for key, value in saved.items():  # each parameter from the first rank that wrote it
            tensors.setdefault(key, value)
    if out_err > tol.output:
        problems.append(f"outputs differ by {out_err:.2e} > {tol.output:.0e}")
    grads = {k[5:]: v for k, v in tensors.items() if k.startswith("grad/")}
    params = {k[6:]: v for k, v in tensors.items() if k.startswith("param/")}
    grad_worst, param_worst = step_errors(
        reference, grads, params, case.get("lr", 1e-3), tol, problems, every_param=True
    )
    counts = [r["collectives"] for r in results]
    pipelined = case["plan"].get("pipeline") is not None  # stages differ in what they send
    if not pipelined and any(c != counts[0] for c in counts):
        problems.append(f"ranks counted different collectives: {counts}")
    return Mismatch(out_err, grad_worst, param_worst, tuple(problems))
