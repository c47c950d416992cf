"""This project against its peers on the main job's own problem (issue 37).

Every arm tunes the rewrite study's space (`rewrite_tuner.study`: the prior family and
the search's knobs) on the training suite (`benchmarks.bench_transfer.TRAIN`) with the same
evaluation (`evaluate_rewrite`: ``--search-seeds`` search seeds x every workload x ``--steps``
steps, common random numbers, so one configuration scores the same in every arm), the same
optimizer seeds and the same trial budget, one trial at a time:

* ``project``: the main job's study as `tuner demo` makes it (the defaults and the informed prior
  first, then its design and model), driven by `Study.optimize` on one worker; proposal seconds
  as the driver timed them (`studies.driver.RunStats.proposals`).
* ``project_flat``: the same study with the flat GP (`StudySettings(surrogate="flat")`) in
  place of ``auto``'s structured surrogate, to weigh what structure costs and gains here.
* ``ax``: Ax's `Client` (its default generation strategy: Sobol, then BoTorch), ``smac``:
  SMAC3's hyperparameter-optimization facade (`SmacPeer`), ``optuna``: Optuna's TPE sampler,
  ``random``: uniform random search on the unit cube of the space (log-scaled where the space
  is). The peers see each parameter natively (bounds, integer, log scale) and maximize both
  objectives, as a new user would set them up; each proposal goes into a study of its own
  through `Study.enqueue`, so the stored trials are alike for every arm.

Each arm's study is then carried through the main job's validation (`bench_transfer.pick`: its
best trials against the defaults on fresh seeds) and its pick through the held-out transfer
(`bench_transfer.held_out`: Llama and ViT, the defaults' runs shared by the arms). Reported, as a
median over optimizer seeds: best ``anytime_hv`` by trial 10 / 20 / 30, proposal p50 (seconds per
proposal, the design included; every arm's torch on one thread, as the project's proposals
run), and each held-out workload's steps ratio (steps the pick needs to reach the defaults'
final hypervolume over the defaults' steps; lower is better).

Usage::

    python -m benchmarks.bench_peers                              # 5 seeds x 30 trials, all arms
    python -m benchmarks.bench_peers --seeds 2 --trials 30        # reduced
    python -m benchmarks.bench_peers --arms project,random --seeds 1 --trials 6 --steps 30
    # seeds (or arms) split over processes, one core each, then one file and table of all:
    python -m benchmarks.bench_peers --seeds 3 --out /tmp/peers_a.json &
    python -m benchmarks.bench_peers --first-seed 3 --seeds 2 --out /tmp/peers_b.json
    python -m benchmarks.bench_peers --merge /tmp/peers_a.json /tmp/peers_b.json
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
from benchmarks._common import compact_json, machine_info, read_results, write_results

ARMS = ("project", "project_flat", "ax", "smac", "optuna", "random")
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


class SmacPeer:
    """SMAC3's hyperparameter-optimization facade (random forest, its Sobol design, expected
    improvement, the facade's mean aggregation of both objectives), seeded, driven by ask and
    tell. The evaluation is deterministic for a configuration (common random numbers), and
    SMAC3 is told so (``deterministic=True``: no configuration is repeated on other seeds)."""

    def __init__(self, space: Any, objectives: dict[str, str], seed: int, trials: int) -> None:
        from ConfigSpace import ConfigurationSpace
        from ConfigSpace import Float as CSFloat
        from ConfigSpace import Integer as CSInteger
        from smac import HyperparameterOptimizationFacade, Scenario

        from spaces import Int

        self._dir = tempfile.TemporaryDirectory()
        cs = ConfigurationSpace(seed=seed)
        for k, p in _ranges(space).items():
            kind = CSInteger if isinstance(p, Int) else CSFloat
            cs.add(kind(k, (p.low, p.high), log=p.log))
        scenario = Scenario(
            cs,
            objectives=list(objectives),
            deterministic=True,
            n_trials=trials,
            seed=seed,
            output_directory=Path(self._dir.name),
        )
        facade = HyperparameterOptimizationFacade
        self.smac = facade(
            scenario,
            _never_called,
            multi_objective_algorithm=facade.get_multi_objective_algorithm(scenario),
            overwrite=True,
            logging_level=logging.ERROR,
        )
        self.signs = {k: -1.0 if d == "maximize" else 1.0 for k, d in objectives.items()}
        self.info: Any = None

    def ask(self) -> dict[str, Any]:
        self.info = self.smac.ask()
        return dict(self.info.config)

    def tell(self, values: dict[str, float]) -> None:
        from smac.runhistory.dataclasses import TrialValue

        cost = [self.signs[k] * values[k] for k in self.signs]  # SMAC3 minimizes costs
        self.smac.tell(self.info, TrialValue(cost=cost))


def _never_called(config: Any, seed: int = 0) -> float:
    """SMAC3's facade wants a target function; driven by ask and tell, it never calls it."""
    raise AssertionError("SMAC3 is driven by ask and tell here")


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
    module = {"ax": "ax", "smac": "smac", "optuna": "optuna"}.get(arm)
    return module is None or importlib.util.find_spec(module) is not None


def _peer(arm: str, space: Any, seed: int, trials: int) -> Peer:
    from rewrite_tuner.study import DEFAULT_OBJECTIVES

    objectives = dict(DEFAULT_OBJECTIVES)
    if arm == "ax":
        return AxPeer(space, objectives, seed)
    if arm == "smac":
        return SmacPeer(space, objectives, seed, trials)
    if arm == "optuna":
        return OptunaPeer(space, objectives, seed)
    if arm == "random":
        return RandomPeer(space, seed)
    raise ValueError(f"unknown arm {arm!r}; pick from {ARMS}")


def drive_peer(peer: Peer, study: Any, trials: int) -> list[float]:
    """Run ``trials`` trials of ``peer`` in ``study`` (each proposal enqueued, claimed, evaluated
    in this process with the study's evaluate and context, told to both); returns the seconds of
    each proposal."""
    from rewrite_tuner.study import DEFAULT_OBJECTIVES, evaluate_rewrite

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
    from rewrite_tuner.study import rewrite_study
    from studies.settings import StudySettings

    t0 = time.perf_counter()
    study = rewrite_study(
        bench_transfer.TRAIN,
        budget=args.steps,
        storage=url,
        seed=seed,
        name=f"{arm}-{seed}",
        seeds=args.search_seeds,
        lead=arm.startswith("project"),
        settings=StudySettings(surrogate="flat") if arm == "project_flat" else None,
    )
    t_cal = time.perf_counter() - t0
    if arm.startswith("project"):
        stats = study.optimize(args.trials, n_workers=1, progress=False)
        proposals = list(stats.proposals)
    else:
        proposals = drive_peer(_peer(arm, study.space, seed, args.trials), study, args.trials)
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
    return _rounded(
        {
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
    )


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


def _summary(runs: list[dict[str, Any]], arms: list[str]) -> None:
    print(
        f"\nMedian over {len(runs)} optimizer seeds: best {PRIMARY} by trial n, proposal p50, "
        "held-out steps to the defaults' final hypervolume over the defaults' (lower is better)"
    )
    for line in _table(runs, arms):
        print(line)


def _rounded(rec: dict[str, Any]) -> dict[str, Any]:
    """An arm's record with its per-trial values to 6 decimals and proposal seconds to 3."""
    return {
        **rec,
        "values": [round(v, 6) for v in rec["values"]],
        "proposal_seconds": [round(t, 3) for t in rec["proposal_seconds"]],
    }


def merge(stems: list[str], out: str) -> Path:
    """One results file and table of runs saved by several processes: other seeds
    (`--first-seed`) or other arms on the same seeds (`--arms`). Their settings must agree but
    for the seeds and arms, and no arm may appear twice for a seed."""
    parts = [read_results(_target(stem)) for stem in stems]
    same = ("trials", "steps", "search_seeds", "held_out_seeds")
    first = parts[0]
    for stem, part in zip(stems[1:], parts[1:], strict=True):
        differ = {k for k in same if part["args"].get(k) != first["args"].get(k)}
        if differ:
            raise SystemExit(f"{stem} was run with other settings ({sorted(differ)}); not merged")
    by_seed: dict[int, dict[str, Any]] = {}
    for stem, part in zip(stems, parts, strict=True):
        for run in part["runs"]:
            into = by_seed.setdefault(run["seed"], {"seed": run["seed"], "arms": {}})
            twice = set(into["arms"]) & set(run["arms"])
            if twice:
                raise SystemExit(f"seed {run['seed']}: arms {sorted(twice)} again in {stem}")
            # rounded again: parts written before `run_arm` rounded its values
            into["arms"].update({arm: _rounded(rec) for arm, rec in run["arms"].items()})
            into.setdefault("held_out_seconds", {})[stem] = run.get("held_out_seconds")
    runs = [by_seed[seed] for seed in sorted(by_seed)]
    found = {a for run in runs for a in run["arms"]}
    # an arm renamed in a part's file (a variant, e.g. other tuner options) keeps its name
    arms = [a for a in ARMS if a in found] + sorted(found - set(ARMS))
    missing = {r["seed"]: [a for a in arms if a not in r["arms"]] for r in runs}
    if any(missing.values()):
        raise SystemExit(f"arms missing on some seeds: { {k: v for k, v in missing.items() if v} }")
    payload = {
        "args": {**first["args"], "seeds": len(runs), "first_seed": runs[0]["seed"], "out": out},
        "merged_from": [
            {"stem": s, "args": p["args"], "machine": p["machine"]}
            for s, p in zip(stems, parts, strict=True)
        ],
        "seeds": sorted(by_seed),
        "train": first["train"],
        "held_out": first["held_out"],
        "arms": arms,
        "not_installed": sorted({a for p in parts for a in p["not_installed"]} - set(arms)),
        "seconds": max(p["seconds"] for p in parts),
        "runs": runs,
    }
    for run in runs:  # JSON keys are strings: the trial counts back to ints
        for rec in run["arms"].values():
            rec["best_at"] = {int(n): v for n, v in rec["best_at"].items()}
    path = write_results(_target(out), payload, machine=first["machine"], dumps=compact_json)
    _summary(runs, arms)
    return path


def _target(name: str) -> str | Path:
    """A results file: a path where ``name`` ends in ``.json`` (parts of a split run, kept out
    of ``benchmarks/results``), else a stem of ``benchmarks/results`` (`write_results`)."""
    return Path(name) if name.endswith(".json") else name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="optimizer seeds (0, 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0, help="first optimizer seed")
    parser.add_argument("--trials", type=int, default=30, help="trials per arm and seed")
    parser.add_argument("--steps", type=int, default=150, help="search steps per run")
    parser.add_argument("--search-seeds", type=int, default=3, help="search seeds per trial")
    parser.add_argument("--held-out-seeds", type=int, default=5, help="0: no held-out transfer")
    parser.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated, of {ARMS} (default: all installed; one named here must be)",
    )
    parser.add_argument(
        "--out", default="bench_peers", help="results file stem, or a path ending in .json"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="STEM",
        help="combine these saved runs (stems or paths) into --out",
    )
    args = parser.parse_args()
    if args.merge:
        print(f"wrote {merge(args.merge, args.out)}")
        return
    asked = [a.strip() for a in (args.arms or ",".join(ARMS)).split(",") if a.strip()]
    unknown = [a for a in asked if a not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; pick from {ARMS}")
    missing = [a for a in asked if not installed(a)]
    if missing and args.arms is not None:
        # named arms are what the run is for: a row without one would read as complete
        parser.error(
            f"arms {missing} are not installed; `make peers` installs them (Ax, SMAC3, "
            "Optuna), or leave them out of --arms"
        )
    for arm in missing:
        print(f"{arm}: not installed, left out (`make peers` installs it)")
    arms = [a for a in asked if a not in missing]
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import torch

    torch.set_num_threads(1)  # every arm's proposals on one thread, as the project's run
    machine = machine_info()
    t0 = time.perf_counter()
    runs = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for seed in seeds:
        runs.append(run_seed(seed, arms, args))
        payload = {
            "args": vars(args),
            "seeds": list(seeds)[: len(runs)],
            "train": bench_transfer.TRAIN,
            "held_out": bench_transfer.HELD_OUT,
            "arms": arms,
            "not_installed": missing,
            "seconds": time.perf_counter() - t0,
            "runs": runs,
        }
        # saved after every seed
        path = write_results(_target(args.out), payload, machine=machine, dumps=compact_json)
    _summary(runs, arms)
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
