"""Peers' own suites: STENSO's 33 array programs against Inductor (and, as a second part, the
search strategies compared on one suite).

Part ``stenso`` (issue 51): for each of STENSO's programs at its published sizes
(`benchmarks._stenso`: read from a checkout of its artifact, which this project does not ship):

* ``inductor``: the program as written, ``torch.compile`` (Inductor, default options);
* ``rewrite``: `rewrite.arrays.optimize` (`rewrite.arrays.rewritten`) of the program, its
  inputs promised positive (as STENSO's are: `benchmarks._stenso.DOMAIN`): the verified search
  on the cost models of Inductor's compiled mode and of eager PyTorch, the predicted-fastest
  graph of each compiled by ``torch.compile``, kept only where it measured faster than the
  program as written beyond noise on the example inputs (else the program as written goes back).

Both arms, and four more (`ARMS`: ``inductor_again``, a second ``torch.compile`` of the
program as written, an A/A arm for the noise floor; ``eager`` and ``rewrite_eager``, the program
as written and the rewritten program run eagerly, to show a compiled call's fixed cost on
programs of microseconds; ``fixed``, a compiled call of next to nothing, whose time bounds what
any rewrite still running a kernel can reach, `fixed_cost_arm`), are timed in one process on
fresh inputs, interleaved (round robin, each sample many calls: these are microsecond kernels),
on a fixed torch thread count (``--threads``, 1 by default: one thread's CPU time is the wall
time on an idle core, the clock of `rewrite.measurement.time_callables`). Reported per program:
each arm's median time per call with a 95% bootstrap interval, the paired speedup (median of
the per-round ratios, 95% bootstrap interval) and the A/A ratio, the rules applied with their
z3 verdicts, a z3 proof of the whole rewritten program at shape-reduced sizes
(`rewrite.prove.prove_pair`; skipped where no reduction shrinks it), and STENSO's own published
PyTorch-row speedup on its three CPUs (`benchmarks._stenso.published`; their geometric means
are reproduced first). The summary gives
the geometric mean with a bootstrap interval (rounds resampled within each program), programs
above 1.1x, programs slower beyond noise (the speedup's interval below 1 and below the A/A
interval: on a shared VM two compilations of one program differ by up to 5% with paired
intervals that exclude 1), and the same figures of STENSO's rows. Results are saved after every
program (run ``stenso`` of ``benchmarks/results/bench_suites.json``; a run of some of the
programs saves as run ``stenso_partial``, or ``--run NAME``), with the load average before and
after each.

Part ``strategies``: the stochastic search, its tuned priors, greedy, best-first and equality
saturation compared on one suite. It lives in ``benchmarks/_suite_strategies.py``, written beside
this part: ``run(args) -> record`` (it saves its own run ``strategies`` of
``bench_suites.json`` through `benchmarks._common.write_results`) and, optionally,
``add_arguments(parser)`` for its options; ``--part strategies`` runs it, ``--part all`` both.

Usage: ``python -m benchmarks.bench_suites --stenso ~/STENSO-Artifact [--programs github_1,...]
[--samples 30] [--threads 1] [--part stenso|strategies|all] [--run NAME]``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks import _stenso
from benchmarks._common import compact_json, machine_info, round_floats, write_results

RESULTS = "bench_suites"
#: The timed arms: the program as written under Inductor (the baseline), the handed-back
#: rewritten program (under Inductor), a second compilation of the program as written (A/A: the
#: noise floor), and, to show what a compiled call's fixed cost is on programs of microseconds,
#: the program as written and the rewritten program run eagerly.
#: Last, the fixed cost of a compiled call whatever it computes: Inductor's ``a * a`` on 10
#: elements (`fixed_cost_arm`), which bounds what any rewrite of a program can reach here.
ARMS = ("inductor", "rewrite", "inductor_again", "eager", "rewrite_eager", "fixed")
#: The eager arms, reported as speedups over the program as written under Inductor.
EAGER_ARMS = ("eager", "rewrite_eager")
#: What each program's entry in the results file holds.
_LAYOUT = (
    "rules: rule -> times applied (none: the program as written went back); proved: [every "
    "rule proved by z3, z3 verdict of the whole program at reduced sizes]; us: median us per call "
    "of the arms (ARMS: inductor, rewrite, inductor_again, eager, rewrite_eager, fixed); "
    "speedup: inductor / rewrite, aa: inductor / inductor_again, each [median, low, high] of the "
    "paired rounds; eager: inductor / eager, inductor / rewrite_eager (medians); bound: "
    "inductor / fixed (median: the speedup of a rewrite to nothing but a compiled call); stenso: "
    "published PyTorch-row speedup per CPU of 'published'"
)
#: Samples here run this many times `rewrite.arrays.rewritten.SAMPLE_SECONDS` of calls.
SAMPLE_FACTOR = 2
#: Draws of the bootstrap interval of the geometric mean.
BOOTSTRAP = 2000


# ---------------------------------------------------------------- one program
def fixed_cost_arm() -> Callable[..., Any]:
    """The ``fixed`` arm: a compiled call that computes next to nothing (Inductor's ``a * a``
    on 10 elements; it ignores the program's arguments). What it takes is the part of every
    compiled call no rewrite can remove: Dynamo's guards and the wrappers around the kernel."""
    import torch

    small = torch.rand(10, generator=torch.Generator().manual_seed(0))
    square = torch.compile(lambda a: a * a, dynamic=False)
    square(small)
    return lambda *_: square(small)


def time_pair(
    arms: dict[str, Callable[..., Any]], inputs: Sequence[Any], samples: int
) -> dict[str, Any]:
    """The arms (`ARMS`) timed interleaved on ``inputs``: per-call medians with their intervals,
    each arm's paired speedup over ``inductor`` (the program as written under Inductor), and
    every round's speedup of ``rewrite``."""
    from rewrite.arrays.rewritten import calls_per_sample
    from rewrite.measurement import time_callables
    from rewrite.stats import paired_ratio_interval

    calls = max(calls_per_sample(arms["inductor"], inputs) * SAMPLE_FACTOR, 1)

    def repeated(fn: Callable[..., Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                fn(*inputs)

        return run

    timed = time_callables({k: repeated(f) for k, f in arms.items()}, repeats=samples, warmup=2)
    base = timed["inductor"].times
    per_call = {
        k: {
            "median_us": m.latency / calls * 1e6,
            "low_us": m.interval[0] / calls * 1e6,
            "high_us": m.interval[1] / calls * 1e6,
        }
        for k, m in timed.items()
    }
    ratios = {k: paired_ratio_interval(base, timed[k].times).to_dict() for k in ARMS[1:]}
    rounds = [a / b for a, b in zip(base, timed["rewrite"].times)]
    return {"calls_per_sample": calls, "clock": timed["inductor"].clock, "us": per_call,
            "speedup": ratios.pop("rewrite"), "aa": ratios.pop("inductor_again"),
            "bound": ratios.pop("fixed"), "eager_speedups": ratios,
            "rounds": rounds}  # fmt: skip


def run_program(
    prog: _stenso.StensoProgram, args: argparse.Namespace, fixed: Callable[..., Any]
) -> dict[str, Any]:
    """Optimize, check, prove and time one program; ``fixed`` is the run's `fixed_cost_arm`."""
    import torch

    from rewrite.arrays import optimize
    from rewrite.prove import prove_pair

    load = os.getloadavg()
    inputs = prog.inputs(args.seed)
    t = time.perf_counter()
    result = optimize(
        prog.program.fn, inputs, name=prog.name, seed=args.seed, domains=_stenso.DOMAIN
    )
    optimize_s = time.perf_counter() - t
    baseline = torch.compile(prog.program.fn, dynamic=False)
    fresh = prog.inputs(args.seed + 1)
    t = time.perf_counter()
    want, got = baseline(*fresh), result(*fresh)
    first_call_s = time.perf_counter() - t
    err = float((got - want).abs().max() / max(float(want.abs().max()), 1e-30))
    proof = ("input", "not rewritten")
    if result.rewritten:
        proof = prove_pair(result.input_graph, result.graph)
    again = torch.compile(prog.program.fn, dynamic=False)
    again(*fresh)
    assert result.eager is not None
    arms: dict[str, Callable[..., Any]] = dict(
        zip(ARMS, (baseline, result, again, prog.program.fn, result.eager, fixed))
    )
    timing = time_pair(arms, fresh, args.samples)
    return {
        "name": prog.name,
        "size": prog.size,
        **result.to_dict(),
        "program_proof": {"verdict": proof[0], "detail": proof[1]},
        "max_rel_error": err,
        "optimize_s": optimize_s,
        "first_calls_s": first_call_s,
        **timing,
        "load_average": [list(load), list(os.getloadavg())],
    }


# ---------------------------------------------------------------- the summary
def geomean_interval(rounds: Sequence[Sequence[float]], seed: int = 0) -> dict[str, float]:
    """Geometric mean over programs of each program's median ratio, with a 95% bootstrap
    interval (each program's rounds resampled, the programs kept)."""
    rng = np.random.default_rng(seed)
    logs = [np.log(np.asarray(r)) for r in rounds]
    point = float(np.exp(np.mean([np.median(x) for x in logs])))
    draws = [
        np.exp(np.mean([np.median(rng.choice(x, size=x.size)) for x in logs]))
        for _ in range(BOOTSTRAP)
    ]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return {"value": point, "low": float(lo), "high": float(hi)}


def _slower(row: dict[str, Any]) -> bool:
    """Slower beyond noise: the speedup's interval lies below 1 and below the A/A interval (two
    compilations of the program as written differ by a few percent on a shared machine)."""
    s, aa = row["speedup"], row["aa"]
    return s["high"] < min(1.0, aa["low"])


def summarize(rows: list[dict[str, Any]], stenso: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Our figures (over the programs run) beside STENSO's published ones (same programs)."""
    names = [r["name"] for r in rows]
    ours = {r["name"]: r["speedup"]["value"] for r in rows}
    out: dict[str, Any] = {
        "ours": {
            **_stenso.summary(ours),
            "geomean_interval": geomean_interval([r["rounds"] for r in rows]),
            "above_1.1_beyond_noise": sum(r["speedup"]["low"] > 1.1 for r in rows),
            "below_1_interval": [r["name"] for r in rows if r["speedup"]["high"] < 1.0],
            "slower_beyond_noise": [r["name"] for r in rows if _slower(r)],
            "aa_range": [min(r["aa"]["value"] for r in rows), max(r["aa"]["value"] for r in rows)],
            "eager_geomeans": {
                k: _stenso.summary({r["name"]: r["eager_speedups"][k]["value"] for r in rows})[
                    "geomean"
                ]
                for k in EAGER_ARMS
            },
            "bound_geomean": _stenso.summary({r["name"]: r["bound"]["value"] for r in rows})[
                "geomean"
            ],
            "rewritten": sum(r["rewritten"] for r in rows),
            "rules_proved": all(v == "proved" for r in rows for v in r["proofs"].values()),
            "programs_proved": sum(r["program_proof"]["verdict"] == "proved" for r in rows),
        },
    }
    for cpu, ratios in stenso.items():  # over the programs run ('published': over all)
        if all(n in ratios for n in names):
            out[f"stenso_{cpu}"] = _stenso.summary({n: ratios[n] for n in names})
    return out


def _slim(row: dict[str, Any], stenso: dict[str, dict[str, float]]) -> dict[str, Any]:
    """What the results file keeps of a program's row (the times' intervals, the rounds, the
    candidates and the reasons stay in the run's output: the results folder must stay small)."""
    iv = lambda d: [d["value"], d["low"], d["high"]]  # noqa: E731
    return {
        "name": row["name"],
        "rules": row["rules"],
        "proved": [
            all(v == "proved" for v in row["proofs"].values()),
            row["program_proof"]["verdict"],
        ],
        "us": [row["us"][k]["median_us"] for k in ARMS],
        "speedup": iv(row["speedup"]),
        "aa": iv(row["aa"]),
        "eager": [row["eager_speedups"][k]["value"] for k in EAGER_ARMS],
        "bound": row["bound"]["value"],
        "stenso": [stenso[c].get(row["name"]) for c in stenso],
    }


def _dumps(obj: Any, depth: int = 0) -> str:
    """The results file as `compact_json` writes it, but a ``programs`` list one line per
    program."""
    import json

    if not isinstance(obj, dict) or not obj:
        return compact_json(obj, depth)
    pad = "  " * (depth + 1)
    items = []
    for k, v in obj.items():
        if k == "programs" and isinstance(v, list):
            rows = f",\n{pad}  ".join(json.dumps(p, separators=(",", ":")) for p in v)
            items.append(f'{pad}"programs": [\n{pad}  {rows}\n{pad}]')
        else:
            items.append(f"{pad}{json.dumps(k)}: {_dumps(v, depth + 1)}")
    return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"


def _table(rows: list[dict[str, Any]], stenso: dict[str, dict[str, float]]) -> str:
    cpus = list(stenso)
    head = (
        f"{'program':10s} {'inductor':>9s} {'rewrite':>9s} {'speedup [95% CI]':>20s} "
        + f"{'eager':>6s} {'rw eager':>8s} {'bound':>6s} "
        + " ".join(f"{'STENSO ' + c:>11s}" for c in cpus)
    )
    lines = [head + "  rules"]
    for r in rows:
        s = r["speedup"]
        pub = " ".join(f"{stenso[c].get(r['name'], math.nan):10.2f}x" for c in cpus)
        rules = ", ".join(f"{k}" + (f" x{v}" if v > 1 else "") for k, v in r["rules"].items())
        lines.append(
            f"{r['name']:10s} {r['us']['inductor']['median_us']:7.1f}us "
            f"{r['us']['rewrite']['median_us']:7.1f}us "
            f"{s['value']:6.2f}x [{s['low']:.2f}, {s['high']:.2f}] "
            f"{r['eager_speedups']['eager']['value']:5.2f}x "
            f"{r['eager_speedups']['rewrite_eager']['value']:7.2f}x "
            f"{r['bound']['value']:5.2f}x {pub}  {rules or '-'}"
        )
    return "\n".join(lines)


def run_key(given: str | None, names: Sequence[str]) -> str:
    """The STENSO part's run key in the results file: ``given``, else ``stenso`` for the whole
    suite and ``stenso_partial`` for some of its programs (a partial run never replaces the
    whole suite's record)."""
    return given or ("stenso" if set(names) >= set(_stenso.PROGRAMS) else "stenso_partial")


def part_stenso(args: argparse.Namespace) -> dict[str, Any]:
    """The STENSO part (see the module docstring); saves as it goes and returns the record."""
    import torch

    root = _stenso.artifact_path(args.stenso)
    names = args.programs.split(",") if args.programs else _stenso.PROGRAMS
    run = run_key(args.run, names)
    suite = _stenso.load_suite(root, names)
    stenso = _stenso.published(root)
    torch.set_num_threads(args.threads)
    machine = machine_info()
    record: dict[str, Any] = {
        "settings": {
            "samples": args.samples,
            "threads": args.threads,
            "seed": args.seed,
            "programs": list(names),
        },  # fmt: skip
        "published": {c: _stenso.summary(v) for c, v in stenso.items()},
        "programs": [],
    }
    for cpu, fig in record["published"].items():
        print(f"STENSO's published PyTorch rows, {cpu}: geomean {fig['geomean']:.3f}x over "
              f"{fig['programs']}, {fig['above_1.1']} above 1.1x, {fig['below_0.95']} below "
              f"0.95x, max {fig['max']:.2f}x ({fig['max_program']})")  # fmt: skip
    fixed = fixed_cost_arm()  # one compiled call for the whole run
    for prog in suite:
        row = run_program(prog, args, fixed)
        record["programs"].append(row)
        record["summary"] = summarize(record["programs"], stenso)
        summary = {  # STENSO's figures over the programs run equal 'published' over all 33
            k: v
            for k, v in record["summary"].items()
            if k == "ours" or len(record["programs"]) < len(_stenso.PROGRAMS)
        }
        slim = {
            **record,
            "summary": summary,
            "programs": [_slim(r, stenso) for r in record["programs"]],
            "layout": _LAYOUT,
        }
        write_results(RESULTS, round_floats(slim, 3), machine=machine, run=run, dumps=_dumps)
        s = row["speedup"]
        print(f"{prog.name}: {s['value']:.2f}x [{s['low']:.2f}, {s['high']:.2f}] "
              f"{row['reason']}", flush=True)  # fmt: skip
    print(_table(record["programs"], stenso))
    print(_summary_text(record["summary"]))
    return record


def _summary_text(s: dict[str, Any]) -> str:
    o, gi = s["ours"], s["ours"]["geomean_interval"]
    lines = [
        f"rewrite vs Inductor: geomean {o['geomean']:.3f}x [{gi['low']:.3f}, {gi['high']:.3f}] "
        f"over {o['programs']}, {o['above_1.1']} above 1.1x ({o['above_1.1_beyond_noise']} beyond "
        f"noise), slower beyond noise: {o['slower_beyond_noise'] or 'none'} (interval below 1: "
        f"{o['below_1_interval'] or 'none'}; A/A {o['aa_range'][0]:.2f}-{o['aa_range'][1]:.2f}x), "
        f"max {o['max']:.2f}x "
        f"({o['max_program']}); {o['rewritten']} rewritten, every rule proved: "
        f"{o['rules_proved']}, {o['programs_proved']} programs proved whole at reduced sizes",
        f"run eagerly instead (speedup over Inductor as written, geomean): as written "
        f"{o['eager_geomeans']['eager']:.3f}x, rewritten {o['eager_geomeans']['rewrite_eager']:.3f}x",
        f"bound (a rewrite to nothing but a compiled call's fixed cost, the 'fixed' arm), geomean: "
        f"{o['bound_geomean']:.3f}x",
    ]
    for k, v in s.items():
        if k.startswith("stenso_"):
            lines.append(
                f"STENSO {k[7:]}: geomean {v['geomean']:.3f}x, {v['above_1.1']} above 1.1x, "
                f"{v['below_0.95']} below 0.95x, max {v['max']:.2f}x ({v['max_program']})"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- parts
def _strategies() -> Any:
    """The strategies part's module (``benchmarks._suite_strategies``), or None if absent."""
    try:
        return importlib.import_module("benchmarks._suite_strategies")
    except ModuleNotFoundError as e:
        if e.name != "benchmarks._suite_strategies":
            raise
        return None


def _part_strategies(args: argparse.Namespace) -> dict[str, Any]:
    mod = _strategies()
    if mod is None:
        raise SystemExit(
            "part 'strategies' is not in this checkout (benchmarks/_suite_strategies.py, issue "
            "51's strategies comparison); run --part stenso."
        )
    record: dict[str, Any] = mod.run(args)
    return record


PARTS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "stenso": part_stenso,
    "strategies": _part_strategies,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", default="stenso", choices=[*PARTS, "all"])
    p.add_argument("--stenso", default=None, help="checkout of STENSO-Artifact ($STENSO_ARTIFACT)")
    p.add_argument("--programs", default="", help="comma-separated names (default: all 33)")
    p.add_argument("--samples", type=int, default=30, help="timed rounds per program")
    p.add_argument("--threads", type=int, default=1, help="torch threads (fixed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--run",
        default=None,
        help="run key of the STENSO part in the results file (default: 'stenso' for all 33 "
        "programs, 'stenso_partial' for a subset, so a partial run never replaces the full one)",
    )
    mod = _strategies()
    if mod is not None and hasattr(mod, "add_arguments"):
        mod.add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, message=".*numpy_T.*|.*\\.T.*")
    for name in PARTS if args.part == "all" else [args.part]:
        PARTS[name](args)


if __name__ == "__main__":
    main()
