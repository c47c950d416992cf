"""This project against its peers on the main job's own problem (issue 37).

Every arm tunes the rewrite study's space (`rewrite_tuner.rewrite_study`: the prior family and
the search's knobs) on the training suite (`benchmarks.bench_transfer.TRAIN`) with the same
evaluation (`evaluate_rewrite`: ``--search-seeds`` search seeds x every workload x ``--steps``
steps, common random numbers, so one configuration scores the same in every arm), the same
optimizer seeds and the same trial budget, one trial at a time:

* ``project``: the main job's study as `tuner demo` makes it (the defaults and the informed prior
  first, then its design and model), driven by `Study.optimize` on one worker; proposal seconds
  as the driver timed them (`studies.driver.RunStats.proposals`).
* ``ax``: Ax's `Client` (its default generation strategy: Sobol, then BoTorch), ``optuna``:
  Optuna's TPE sampler, ``random``: uniform random search on the unit cube of the space
  (log-scaled where the space is). SMAC3 has no arm: it is not in the project's ``peers`` extra
  and was not installed where this was written. The peers see each
  parameter natively (bounds, integer, log scale) and maximize both objectives, as a new user
  would set them up; each proposal goes into a study of its own through `Study.enqueue`, so the
  stored trials are alike for every arm.

Each arm's study is then carried through the main job's validation (`bench_transfer.pick`: its
best trials against the defaults on fresh seeds) and its pick through the held-out transfer
(`bench_transfer.held_out`: Llama and ViT, the defaults' runs shared by the arms). Reported, as a
median over optimizer seeds: best ``anytime_hv`` by trial 10 / 20 / 30, proposal p50 (seconds per
proposal, the design included), and each held-out workload's steps ratio (steps the pick needs to
reach the defaults' final hypervolume over the defaults' steps; lower is better).

Usage::

    python -m benchmarks.bench_peers                              # 5 seeds x 30 trials, all arms
    python -m benchmarks.bench_peers --seeds 2 --trials 30        # reduced
    python -m benchmarks.bench_peers --arms project,random --seeds 1 --trials 6 --steps 30
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmarks import bench_transfer
from benchmarks._common import machine_info, write_results

ARMS = ("project", "ax", "optuna", "random")
AT = (10, 20, 30)
PRIMARY = "anytime_hv"


class Peer(Protocol):
    """An optimizer driven one trial at a time: ``ask`` a configuration of the space's tuned
    parameters, then ``tell`` its objective values."""

    def ask(self) -> dict[str, Any]: ...

    def tell(self, values: dict[str, float]) -> None: ...


def _ranges(space: Any) -> dict[str, Any]:
    """The space's tuned parameters (its `Float` and `Int`; `Fixed` ones are left out)."""
    from spaces import Float, Int

    return {k: p for k, p in space.params.items() if isinstance(p, Float | Int)}


class AxPeer:
    """Ax's `Client` with its default generation strategy, both objectives maximized."""

    def __init__(self, space: Any, objectives: dict[str, str], seed: int) -> None:
        from ax.api.client import Client
        from ax.api.configs import RangeParameterConfig

        from spaces import Int

        _quiet_ax()
        self.client = Client(random_seed=seed)
        params = [
            RangeParameterConfig(
                name=k,
                bounds=(float(p.low), float(p.high)),
                parameter_type="int" if isinstance(p, Int) else "float",
                scaling="log" if p.log else "linear",
            )
            for k, p in _ranges(space).items()
        ]
        self.client.configure_experiment(parameters=params, name="bench_peers")
        signs = {"maximize": "", "minimize": "-"}
        self.client.configure_optimization(
            objective=", ".join(f"{signs[d]}{k}" for k, d in objectives.items())
        )
        self.index: int | None = None

    def ask(self) -> dict[str, Any]:
        ((self.index, params),) = self.client.get_next_trials(max_trials=1).items()
        _quiet_ax()  # loggers of the modules the first proposals imported
        return dict(params)

    def tell(self, values: dict[str, float]) -> None:
        assert self.index is not None
        self.client.complete_trial(self.index, raw_data=dict(values))


def _quiet_ax() -> None:
    """Ax sets INFO on each of its loggers as its modules load: raise them to ERROR."""
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("ax"):
            logging.getLogger(name).setLevel(logging.ERROR)


class OptunaPeer:
    """Optuna's TPE sampler (its defaults, seeded) on a multi-objective study."""

    def __init__(self, space: Any, objectives: dict[str, str], seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.study = optuna.create_study(
            directions=list(objectives.values()), sampler=optuna.samplers.TPESampler(seed=seed)
        )
        self.objectives = list(objectives)
        self.ranges = _ranges(space)
        self.trial: Any = None

    def ask(self) -> dict[str, Any]:
        from spaces import Int

        self.trial = self.study.ask()
        return {
            k: (self.trial.suggest_int if isinstance(p, Int) else self.trial.suggest_float)(
                k, p.low, p.high, log=p.log
            )
            for k, p in self.ranges.items()
        }

    def tell(self, values: dict[str, float]) -> None:
        self.study.tell(self.trial, [values[k] for k in self.objectives])


class RandomPeer:
    """Uniform random configurations of the unit cube (`Space.from_unit`: log-scaled where the
    space is)."""

    def __init__(self, space: Any, seed: int) -> None:
        self.space, self.rng = space, np.random.default_rng(seed)

    def ask(self) -> dict[str, Any]:
        import torch

        x = torch.tensor(self.rng.random((1, self.space.dim)), dtype=torch.float64)
        return dict(self.space.from_unit(x)[0])

    def tell(self, values: dict[str, float]) -> None:
        pass


def installed(arm: str) -> bool:
    """Whether an arm's package is importable (the project and random always are)."""
    module = {"ax": "ax", "optuna": "optuna"}.get(arm)
    return module is None or importlib.util.find_spec(module) is not None


def _peer(arm: str, space: Any, seed: int) -> Peer:
    from rewrite_tuner.rewrite_study import DEFAULT_OBJECTIVES

    objectives = dict(DEFAULT_OBJECTIVES)
    if arm == "ax":
        return AxPeer(space, objectives, seed)
    if arm == "optuna":
        return OptunaPeer(space, objectives, seed)
    if arm == "random":
        return RandomPeer(space, seed)
    raise ValueError(f"unknown arm {arm!r}; pick from {ARMS}")


def drive_peer(peer: Peer, study: Any, trials: int) -> list[float]:
    """Run ``trials`` trials of ``peer`` in ``study`` (each proposal enqueued, claimed, evaluated
    in this process with the study's evaluate and context, told to both); returns the seconds of
    each proposal."""
    from rewrite_tuner.rewrite_study import DEFAULT_OBJECTIVES, evaluate_rewrite

    seconds = []
    for _ in range(trials):
        t0 = time.perf_counter()
        config = peer.ask()
        seconds.append(time.perf_counter() - t0)
        study.enqueue(config)
        trial = study.ask()
        result = evaluate_rewrite(trial.config, study.context)
        values = {k: float(result[k]) for k in DEFAULT_OBJECTIVES}
        study.tell(trial, values, metrics={k: v for k, v in result.items() if k not in values})
        peer.tell(values)
    return seconds


def run_arm(arm: str, seed: int, args: argparse.Namespace, url: str) -> dict[str, Any]:
    """One arm, one optimizer seed: tune, validate; the pick's held-out transfer is run by the
    caller for every arm at once."""
    from rewrite_tuner.rewrite_study import rewrite_study

    t0 = time.perf_counter()
    study = rewrite_study(
        bench_transfer.TRAIN,
        budget=args.steps,
        storage=url,
        seed=seed,
        name=f"{arm}-{seed}",
        seeds=args.search_seeds,
        lead=arm == "project",
    )
    t_cal = time.perf_counter() - t0
    if arm == "project":
        stats = study.optimize(args.trials, n_workers=1, progress=False)
        proposals = list(stats.proposals)
    else:
        proposals = drive_peer(_peer(arm, study.space, seed), study, args.trials)
    t_tune = time.perf_counter() - t0 - t_cal
    trials = sorted(study.trials, key=lambda t: t.number)
    values = [float((t.values or {}).get(PRIMARY, float("-inf"))) for t in trials]
    report, chosen = bench_transfer.pick(study)
    t_val = time.perf_counter() - t0 - t_cal - t_tune
    best = {n: float(max(values[:n])) for n in AT if n <= len(values)}
    print(
        f"  seed {seed} {arm:8s} best {PRIMARY} "
        + " ".join(f"@{n} {v:.3f}" for n, v in best.items())
        + f"  proposal p50 {np.median(proposals) if proposals else 0:.2f} s"
        + f"  pick trial {report.shown} ({'beats' if report.chosen is not None else 'does not beat'}"
        f" the defaults)  {t_tune:.0f} s tuning",
        flush=True,
    )
    return {
        "values": values,
        "best_at": best,
        "proposal_seconds": proposals,
        "shown": report.shown,
        "beats_defaults": report.chosen is not None,
        "config": {k: v for k, v in chosen.items() if k != "prior_model"},
        "seconds": {"calibration": t_cal, "tuning": t_tune, "validation": t_val},
        "_chosen": chosen,
        "_default": dict(study.space.default()),
    }


def run_seed(seed: int, arms: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Every arm with optimizer seed ``seed``, then their picks on the held-out workloads."""
    out: dict[str, Any] = {"seed": seed, "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'peers.db'}"
        for arm in arms:
            out["arms"][arm] = run_arm(arm, seed, args, url)
    picks = {arm: rec.pop("_chosen") for arm, rec in out["arms"].items()}
    default = [rec.pop("_default") for rec in out["arms"].values()][0]
    if args.held_out_seeds:
        t0 = time.perf_counter()
        comps = bench_transfer.held_out(picks, default, args.held_out_seeds, f"seed {seed} ")
        for arm, comp in comps.items():
            out["arms"][arm]["held_out"] = {w: r["reach"] for w, r in comp["per_workload"].items()}
        out["held_out_seconds"] = time.perf_counter() - t0
    return out


def _table(runs: list[dict[str, Any]], arms: list[str]) -> list[str]:
    """Medians over optimizer seeds, one row per arm."""
    cols = (
        [f"@{n}" for n in AT] + ["proposal p50"] + [f"{w} ratio" for w in bench_transfer.HELD_OUT]
    )
    lines = ["| arm | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for arm in arms:
        recs = [r["arms"][arm] for r in runs]
        cells = []
        for n in AT:
            got = [rec["best_at"][n] for rec in recs if n in rec["best_at"]]
            cells.append(f"{np.median(got):.3f}" if got else "-")
        props = [s for rec in recs for s in rec["proposal_seconds"]]
        cells.append(f"{np.median(props):.2f} s" if props else "-")
        for w in bench_transfer.HELD_OUT:
            ratios = [rec["held_out"][w]["ratio"] for rec in recs if "held_out" in rec]
            cells.append(f"{np.median(ratios):.2f}x" if ratios else "-")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="optimizer seeds (0, 1, ...)")
    parser.add_argument("--trials", type=int, default=30, help="trials per arm and seed")
    parser.add_argument("--steps", type=int, default=150, help="search steps per run")
    parser.add_argument("--search-seeds", type=int, default=3, help="search seeds per trial")
    parser.add_argument("--held-out-seeds", type=int, default=5, help="0: no held-out transfer")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {ARMS}")
    parser.add_argument("--out", default="bench_peers", help="results file stem")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    machine = machine_info()
    asked = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in asked if a not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; pick from {ARMS}")
    missing = [a for a in asked if not installed(a)]
    for arm in missing:
        print(f"{arm}: not installed, left out (`make bench` installs the peers extra)")
    arms = [a for a in asked if a not in missing]
    t0 = time.perf_counter()
    runs = []
    for seed in range(args.seeds):
        runs.append(run_seed(seed, arms, args))
        payload = {
            "args": vars(args),
            "seeds": list(range(seed + 1)),
            "train": bench_transfer.TRAIN,
            "held_out": bench_transfer.HELD_OUT,
            "arms": arms,
            "not_installed": missing,
            "seconds": time.perf_counter() - t0,
            "runs": runs,
        }
        path = write_results(args.out, payload, machine=machine)  # saved after every seed
    print(
        f"\nMedian over {len(runs)} optimizer seeds: best {PRIMARY} by trial n, proposal p50, "
        "held-out steps to the defaults' final hypervolume over the defaults' (lower is better)"
    )
    for line in _table(runs, arms):
        print(line)
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
