"""The main job against its peers on its own problem: this project, Ax, Optuna TPE and random
search tuning the rewrite search on the built-in study's space, side by side.

Every arm tunes the same problem (`rewrite_tuner.rewrite_study.rewrite_problem` on GPT-2, BERT,
ResNet and T5, 150 steps, 3 search seeds per trial, the family space), with the same evaluation
(`evaluate_rewrite`: deterministic for a configuration, so evaluations are shared between arms
of one optimizer seed), the same budget and the same optimizer seeds. Each peer gets the space
as its own parameters (`peer_parameters`: floats and ints with their bounds and log scales; the
fixed parameters stay fixed) and maximizes ``anytime_hv`` and ``final_hv``:

* ``this project``: `tuner.Tuner` as a new rewrite study drives it (the defaults and the prior
  family's informed member first, a 5-point design, then qLogNEHVI on the flat GP);
* ``ax``: Ax's `Client` (its default generation strategy: center, Sobol, then BoTorch);
* ``optuna_tpe``: Optuna's multi-objective TPE sampler;
* ``random``: the space's scrambled Sobol sequence.

SMAC3 is not in the project's lock (``smac`` is not installed), so it is not an arm.

Prints the median best ``anytime_hv`` by trial 10, 20 and the budget and the median proposal
seconds of each arm, and writes ``benchmarks/results/bench_peers.json``.

Usage: ``python -m benchmarks.bench_peers [--seeds 3] [--trials 30] [--arms tuner,ax,...]``
(the peers: ``make bench`` installs them, or ``pip install -c constraints.txt -e ".[peers]"``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._common import machine_info, write_results

TRAIN = ("gpt2", "bert", "resnet", "t5")
ARMS = ("tuner", "ax", "optuna_tpe", "random")


class Evaluations:
    """``evaluate_rewrite`` on the problem's context, cached by configuration (the
    evaluation is deterministic: fixed search seeds), with the objective values returned."""

    def __init__(self, context: dict[str, Any]) -> None:
        self.context = context
        self.cache: dict[str, dict[str, float]] = {}

    def __call__(self, config: dict[str, Any]) -> dict[str, float]:
        from rewrite_tuner.rewrite_study import evaluate_rewrite

        key = json.dumps(config, sort_keys=True, default=str)
        if key not in self.cache:
            self.cache[key] = evaluate_rewrite(config, self.context)
        return self.cache[key]


def peer_parameters(space: Any) -> tuple[list[tuple[str, str, float, float, bool]], dict]:
    """The space's tuned parameters as ``(name, "float" | "int", low, high, log)`` and its
    fixed ones as name -> value (the family space has no other kinds).

    Raises:
        TypeError: For a parameter kind the peers' adapters do not map.
    """
    from spaces import Fixed, Float, Int

    tuned, fixed = [], {}
    for name, p in space.params.items():
        if isinstance(p, Fixed):
            fixed[name] = p.value
        elif isinstance(p, Float | Int):
            kind = "int" if isinstance(p, Int) else "float"
            tuned.append((name, kind, p.low, p.high, bool(p.log)))
        else:
            raise TypeError(f"bench_peers maps floats, ints and fixed values, not {p!r}.")
    return tuned, fixed


def run_tuner(space: Any, evaluate: Evaluations, budget: int, seed: int) -> list[dict]:
    from rewrite_tuner.rewrite_study import DEFAULT_OBJECTIVES, LEAD_DESIGN, lead_configs
    from tuner import Tuner

    tuner = Tuner(space, DEFAULT_OBJECTIVES, seed=seed, n_initial=LEAD_DESIGN)
    for config in lead_configs(space):
        tuner.enqueue(config)
    rows = []
    for _ in range(budget):
        t0 = time.perf_counter()
        (trial,) = tuner.ask(1)
        ask = time.perf_counter() - t0
        res = evaluate(trial.config)
        values = {k: res[k] for k in DEFAULT_OBJECTIVES}
        tuner.tell(trial.id, values, metrics={f"{k}.sem": res[f"{k}.sem"] for k in values})
        rows.append({**values, "ask_s": ask})
    return rows


def run_random(space: Any, evaluate: Evaluations, budget: int, seed: int) -> list[dict]:
    return [
        {"anytime_hv": (r := evaluate(c))["anytime_hv"], "final_hv": r["final_hv"], "ask_s": 0.0}
        for c in space.sample(budget, seed)
    ]


def run_ax(space: Any, evaluate: Evaluations, budget: int, seed: int) -> list[dict]:
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    tuned, fixed = peer_parameters(space)
    params = [
        RangeParameterConfig(
            name=n, parameter_type=kind, bounds=(lo, hi), scaling="log" if log else "linear"
        )
        for n, kind, lo, hi, log in tuned
    ]
    for name in list(logging.Logger.manager.loggerDict):  # Ax sets INFO on each of its loggers
        if name.startswith("ax"):
            logging.getLogger(name).setLevel(logging.ERROR)
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=params)
    client.configure_optimization(objective="anytime_hv, final_hv")
    rows: list[dict] = []
    while len(rows) < budget:
        t0 = time.perf_counter()
        trials = client.get_next_trials(max_trials=1)
        ask = time.perf_counter() - t0
        for idx, p in trials.items():
            res = evaluate({**fixed, **p})
            values = {k: res[k] for k in ("anytime_hv", "final_hv")}
            client.complete_trial(idx, raw_data=values)
            rows.append({**values, "ask_s": ask})
    return rows[:budget]


def run_optuna_tpe(space: Any, evaluate: Evaluations, budget: int, seed: int) -> list[dict]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuned, fixed = peer_parameters(space)
    study = optuna.create_study(
        directions=["maximize", "maximize"], sampler=optuna.samplers.TPESampler(seed=seed)
    )
    rows: list[dict] = []
    for _ in range(budget):
        t0 = time.perf_counter()
        trial = study.ask()
        config = dict(fixed)
        for n, kind, lo, hi, log in tuned:
            suggest = trial.suggest_int if kind == "int" else trial.suggest_float
            config[n] = suggest(n, lo, hi, log=log)
        ask = time.perf_counter() - t0
        res = evaluate(config)
        study.tell(trial, [res["anytime_hv"], res["final_hv"]])
        rows.append({"anytime_hv": res["anytime_hv"], "final_hv": res["final_hv"], "ask_s": ask})
    return rows


RUNNERS: dict[str, Callable[[Any, Evaluations, int, int], list[dict]]] = {
    "tuner": run_tuner,
    "ax": run_ax,
    "optuna_tpe": run_optuna_tpe,
    "random": run_random,
}


def best(rows: list[dict], n: int) -> float:
    """The best ``anytime_hv`` among the first ``n`` trials."""
    return max(r["anytime_hv"] for r in rows[:n])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="optimizer seeds")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--arms", default=",".join(ARMS))
    args = ap.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(RUNNERS))
    if unknown:
        ap.error(f"unknown arms {unknown}; choose from {list(RUNNERS)}")
    warnings.filterwarnings("ignore")
    from rewrite_tuner.rewrite_study import rewrite_problem

    machine = machine_info()
    space, context = rewrite_problem(TRAIN, max_steps=args.steps)
    settings = {"train": TRAIN, "steps": args.steps, "trials": args.trials, "arms": arms}
    runs: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        evaluate = Evaluations(context)  # shared by the arms of this seed
        for arm in arms:
            t0 = time.perf_counter()
            rows = RUNNERS[arm](space, evaluate, args.trials, seed)
            runs.append({"arm": arm, "seed": seed, "rows": rows})
            print(
                f"  {arm} seed {seed}: best anytime_hv @10 {best(rows, 10):.3f} "
                f"@{args.trials} {best(rows, args.trials):.3f} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            write_results("bench_peers", {**settings, "runs": runs}, machine=machine)
    marks = [n for n in (10, 20, args.trials) if n <= args.trials]
    print(f"\nmedian over {args.seeds} optimizer seeds; best anytime_hv by trial:")
    print(f"{'arm':12s} " + " ".join(f"{'@' + str(n):>7s}" for n in marks) + "  proposal p50")
    for arm in arms:
        rs = [r["rows"] for r in runs if r["arm"] == arm]
        cells = " ".join(f"{np.median([best(r, n) for r in rs]):7.3f}" for n in marks)
        asks = np.median([x["ask_s"] for r in rs for x in r])
        print(f"{arm:12s} {cells}  {asks:.2f} s")
    print("wrote benchmarks/results/bench_peers.json")


if __name__ == "__main__":
    main()
