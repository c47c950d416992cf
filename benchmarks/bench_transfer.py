"""Does tuning pay off on models it never saw? The main job against the defaults.

Three parts, each in this one run (so every ratio compares figures of the same machine state):

1. **Noise** (``--noise``): the defaults and 6 Sobol configurations of the rewrite study's space on
   the training suite, 8 seeds each. The spread of the configurations' means against the seed
   noise says how many seeds a trial needs (`rewrite_tuner.study.DEFAULT_SEEDS`).
2. **Transfer** (default): for each tuner seed and each ``SPACE[:SURROGATE]`` of ``--priors``
   (``family``, the main job's space, or ``rules``, one weight per rule; the study's surrogate,
   ``auto`` unless named, e.g. ``family:flat``), the main job as `tuner demo` runs it
   (calibration, a study of ``--trials`` trials on 2 workers, validation on fresh seeds), then
   arms on the held-out workloads with the same seeds: the defaults, the tuned knobs with the
   default priors, the tuned priors with the default knobs, the tuned configuration, and for the
   family its log-derived informed member alone (prior weight 1, default knobs). Reported per
   workload: median steps to the defaults' final hypervolume (95% interval) and its ratio to the
   defaults', final hypervolume, latency reduction; over tuner seeds, the tuned arm's ratio
   per space with an interval, and each other space's paired with ``family``'s. Saved after
   every tuner seed and space.
3. **Surrogates** (``--surrogates flat,structured,saas,rules:flat,rules:saas``): the study's own
   problem driven by `tuner.Tuner` one trial at a time per surrogate (``rules:`` the space with
   one free weight per rule instead of the informed prior family; ``+lead``: the lead design of
   a new study; ``grouped``: each workload's runs as a task of a multi-task GP, averaged back,
   ``grouped_independent``: one GP per workload; ``structured_trials``: the structured
   surrogate learning from the trials' rows, as the main job, whose trials report no runs), with the same tuner seeds: hypervolume of
   (anytime_hv, final_hv) at 10/20/40 trials and proposal seconds (wall, CPU).

Usage::

    python -m benchmarks.bench_transfer                         # 3 tuner seeds, 30 trials
    python -m benchmarks.bench_transfer --quick                 # 1 tuner seed, 12 trials
    python -m benchmarks.bench_transfer --tuner-seeds 8 --held-out-seeds 10 --priors family,rules,family:flat
    python -m benchmarks.bench_transfer --no-transfer --surrogates flat,structured,saas,rules:flat,rules:saas --trials 40
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import (
    compact_json,
    machine_info,
    paired_test,
    round_floats,
    write_results,
)

TRAIN: tuple[str, ...] = ("gpt2", "bert", "resnet", "t5")
HELD_OUT = ("llama", "vit")


def _split(config: dict[str, Any]) -> tuple[Any, Any]:
    from rewrite_tuner.knobs import config_from_params

    return config_from_params(config)


def noise(steps: int, seeds: int = 8) -> dict[str, Any]:
    """Seed noise of the defaults and 6 Sobol configurations against their spread."""
    from rewrite.optimize import search_suite
    from rewrite_tuner.problem import workload_graphs
    from rewrite_tuner.scores import per_seed
    from rewrite_tuner.study import Calibration, rewrite_problem

    space, context = rewrite_problem(TRAIN, max_steps=steps)
    baselines = Calibration.from_dict(context["calibration"]).baselines
    configs = [space.default(), *space.sample(6, seed=11)]
    rows = []
    for i, config in enumerate(configs):
        cfg, pri = _split(config)
        res = search_suite(workload_graphs(TRAIN), cfg, pri, "h100", range(100, 100 + seeds))
        per = per_seed(res, baselines)
        rows.append({k: [row[k] for row in per] for k in ("anytime_hv", "final_hv")})
        print(f"  noise: config {i}: anytime_hv {np.mean(rows[-1]['anytime_hv']):.3f}", flush=True)
    out: dict[str, Any] = {"seeds": seeds, "configs": len(configs)}
    for k in ("anytime_hv", "final_hv"):
        sd = float(np.sqrt(np.mean([np.var(r[k], ddof=1) for r in rows])))
        spread = float(np.std([np.mean(r[k]) for r in rows], ddof=1))
        out[k] = {"seed_sd": sd, "spread_of_means": spread, "ratio": spread / sd}
    return out


def _arms(study: Any, chosen: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The configurations of the transfer table: the defaults, the tuned knobs with the default
    priors, the tuned priors with the default knobs, the tuned configuration, and for a prior
    family its informed member (prior weight 1, default knobs)."""
    from rewrite_tuner.knobs import PRIOR_WEIGHT, is_prior_param

    default = study.space.default()
    priors = {k for k in study.space.params if is_prior_param(k)}
    knobs = {k: v for k, v in chosen.items() if k in study.space.params and k not in priors}
    tuned_priors = {k: v for k, v in chosen.items() if k in priors}
    arms = {"defaults": default}
    if PRIOR_WEIGHT in study.space.params:
        arms["informed prior alone"] = {**default, PRIOR_WEIGHT: 1.0}
    return arms | {
        "tuned knobs, default priors": {**default, **knobs, **{k: default[k] for k in priors}},
        "tuned priors, default knobs": {**default, **tuned_priors},
        "tuned": chosen,
    }


def pick(study: Any) -> tuple[Any, dict[str, Any]]:
    """The main job's validation of a finished study (its best trials against the defaults on
    fresh training seeds; `rewrite_tuner.transfer.validate`): the report and the configuration
    it shows (the defaults when no other trial is on the Pareto front)."""
    from rewrite_tuner.transfer import validate

    report = validate(study, held_out=[])
    if report.shown is None:
        return report, dict(study.space.default())
    return report, next(t.config for t in study.trials if t.number == report.shown)


def held_out(
    arms: dict[str, dict[str, Any]], default: dict[str, Any], held_seeds: int, label: str = ""
) -> dict[str, dict[str, Any]]:
    """Each arm's configuration against ``default`` on the held-out workloads (`HELD_OUT`,
    seeds 3000 onward; the defaults' runs shared by the arms): `Comparison.to_dict` per arm."""
    from rewrite_tuner.compare import compare
    from rewrite_tuner.problem import workload_graphs

    seeds = range(3000, 3000 + held_seeds)
    graphs = workload_graphs(HELD_OUT)
    reference = _split(default)
    ref = None
    out: dict[str, dict[str, Any]] = {}
    for name, config in arms.items():
        comp = compare(graphs, _split(config), reference, seeds, reference_result=ref)
        ref = comp.reference
        out[name] = comp.to_dict()
        ratios = {w: round(r["reach"]["ratio"], 2) for w, r in comp.per_workload.items()}
        print(f"  {label}{name:28s} reach ratio {ratios}", flush=True)
    return out


#: What the results file keeps of an arm on a held-out workload (`_brief`).
BRIEF_LAYOUT = {
    "reach": "[median steps to the defaults' final hypervolume, 95% low, high, ratio to the "
    "defaults' median, censored runs]",
    "anytime_hv, final_hv, latency_reduction": "difference to the defaults [median, 95% low, high]",
}


def _brief(comparison: dict[str, Any]) -> dict[str, list[float]]:
    """A `Comparison.to_dict` as the results file keeps it: per held-out workload, the lists of
    `BRIEF_LAYOUT` (4 significant digits)."""
    out: dict[str, Any] = {}
    for w, row in comparison["per_workload"].items():
        reach = row["reach"]
        brief = {"reach": [*_triple(reach["candidate"]), reach["ratio"], reach["censored"]]}
        for k in ("anytime_hv", "final_hv", "latency_reduction"):
            brief[k] = _triple(row[k]["difference"])
        out[w] = brief
    return round_floats(out, 4)


def _triple(interval: dict[str, float]) -> list[float]:
    """An `Interval.to_dict` as ``[value, low, high]``."""
    return [interval["value"], interval["low"], interval["high"]]


def _interval_lists(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The validation's candidates (`TransferReport.candidates`) with each interval as
    ``[value, low, high]`` (4 significant digits)."""
    return [
        {
            **c,
            "training": {k: _triple(iv) for k, iv in c["training"].items()},
        }
        for c in round_floats(candidates, 4)
    ]


def transfer(
    tuner_seed: int, trials: int, steps: int, held_seeds: int, space: str = "family"
) -> dict[str, Any]:
    """One tuner seed of the main job, then the arms on the held-out workloads. ``space``:
    ``PRIORS[:SURROGATE]``, the study's ``priors`` (``"family"`` or ``"rules"``, one weight per
    rule; see `rewrite_tuner.study`) and its `StudySettings.surrogate` (``auto`` when
    not named)."""
    from rewrite_tuner.study import rewrite_study
    from studies.settings import StudySettings

    priors, _, surrogate = space.partition(":")
    settings = StudySettings(surrogate=surrogate or "auto")

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'study.db'}"
        t0 = time.perf_counter()
        study = rewrite_study(
            TRAIN,
            budget=steps,
            storage=url,
            seed=tuner_seed,
            name="bench",
            priors=priors,
            settings=settings,
        )
        t_cal = time.perf_counter() - t0
        study.optimize(trials, n_workers=2, progress=False)
        t_opt = time.perf_counter() - t0 - t_cal
        report, chosen = pick(study)
        t_val = time.perf_counter() - t0 - t_cal - t_opt
        arms = _arms(study, chosen)
        compared = held_out(arms, arms["defaults"], held_seeds, f"{space} seed {tuner_seed} ")
        return {
            "tuner_seed": tuner_seed,
            "space": space,
            "seconds": {"calibration": t_cal, "optimize": t_opt, "validation": t_val},
            "chosen": report.chosen,
            "shown": report.shown,
            "beats_defaults": report.chosen is not None,
            "candidates": _interval_lists(report.candidates),
            "config": round_floats({k: v for k, v in chosen.items() if k != "prior_model"}, 4),
            "held_out_seeds": compared["defaults"]["seeds"],
            "arms": {name: _brief(comp) for name, comp in compared.items()},
        }


def _surrogate(name: str) -> Any:
    """The surrogate the rewrite study makes for mode `name` (machine-dependent metrics not
    read; None for ``"flat"``, the tuner's own GP)."""
    from rewrite_tuner.study import unmodeled_metrics
    from studies.settings import StudySettings
    from studies.tuning import make_surrogate
    from tuner.groups import GroupedSurrogate

    settings = StudySettings(ignore_metrics=unmodeled_metrics())
    if name == "flat":
        return None
    if name == "grouped_independent":  # the grouped surrogate without shared evidence
        return GroupedSurrogate("independent", {"maxiter": settings.options().fit_maxiter})
    if name == "structured_trials":  # as the main job runs it: its trials report no runs
        from benchmarks._surrogate_variants import VariantSurrogate
        from structure import StructuredConfig

        config = StructuredConfig(ignore_metrics=settings.ignore_metrics)
        return VariantSurrogate(config=config, rows="trials")
    return make_surrogate(name, settings)


def surrogates(names: list[str], tuner_seed: int, trials: int, steps: int) -> dict[str, Any]:
    """The study's problem under each ``[space:]surrogate[+lead]`` (space ``family``, the
    default, or ``rules``: one weight per rule; ``+lead``: the defaults and the family's informed
    member run first, then a 5-point design, as a new rewrite study does): hypervolume at
    10/20/40 and proposal time. Evaluations are deterministic (fixed search seeds) and shared
    between arms of one tuner seed."""
    from rewrite_tuner.study import (
        DEFAULT_OBJECTIVES,
        LEAD_DESIGN,
        Calibration,
        evaluate_rewrite,
        lead_configs,
        rewrite_problem,
    )
    from tuner import Tuner

    # every run's values reported (the grouped surrogates model them; the others do not read them)
    family, context = rewrite_problem(TRAIN, max_steps=steps, run_metrics=True)
    cal = Calibration.from_dict(context["calibration"])
    rules, _ = rewrite_problem(TRAIN, max_steps=steps, priors="rules", calibration=cal)
    out: dict[str, Any] = {}
    seen: dict[str, dict[str, float]] = {}  # config -> evaluation, shared by the arms
    for name in names:
        space_name, _, model = name.rpartition(":")
        model, _, design = model.partition("+")
        space = rules if space_name == "rules" else family
        surrogate = _surrogate(model)
        lead = design == "lead"
        tuner = Tuner(
            space,
            DEFAULT_OBJECTIVES,
            seed=tuner_seed,
            surrogate=surrogate,
            n_initial=LEAD_DESIGN if lead else None,
        )
        if lead:
            for config in lead_configs(space):
                tuner.enqueue(config)
        values, walls, cpus, used = [], [], [], []
        for _ in range(trials):
            t0, c0 = time.perf_counter(), time.process_time()
            (trial,) = tuner.ask(1)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            fitted = tuner.last_fit if surrogate is not None else None
            used.append(str((fitted.description if fitted else {}).get("model", "flat")))
            key = json.dumps(trial.config, sort_keys=True, default=str)
            res = seen.get(key) or evaluate_rewrite(trial.config, context)
            seen[key] = res
            vals = {k: res[k] for k in DEFAULT_OBJECTIVES}
            tuner.tell(trial.id, vals, metrics={k: v for k, v in res.items() if k not in vals})
            values.append([vals[k] for k in DEFAULT_OBJECTIVES])
        out[name] = {
            "values": values,
            "ask_wall": walls,
            "ask_cpu": cpus,
            "model": used,
            "dim": space.dim,
        }
        print(f"  surrogate {name} seed {tuner_seed}: done", flush=True)
    return out


def _hv(values: list[list[float]], n: int, ref: np.ndarray) -> float:
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    Y = torch.tensor(values[:n], dtype=torch.float64)
    return float(Hypervolume(torch.tensor(ref)).compute(Y[(torch.tensor(ref) < Y).all(-1)]))


def main() -> None:
    global TRAIN
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tuner-seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first tuner seed (to extend a stored run)"
    )
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--held-out-seeds", type=int, default=5)
    parser.add_argument(
        "--priors",
        default="family",
        help="the transfer part's PRIORS[:SURROGATE] list, e.g. family,rules,family:flat",
    )
    parser.add_argument("--noise", action="store_true")
    parser.add_argument("--no-transfer", action="store_true")
    parser.add_argument("--surrogates", default="")
    parser.add_argument("--train", default=",".join(TRAIN), help="training workloads")
    parser.add_argument("--out", default="bench_transfer")
    parser.add_argument(
        "--run", default=None, help="run name in the file (default: transfer or surrogates)"
    )
    args = parser.parse_args()
    TRAIN = tuple(args.train.split(","))
    if args.quick:
        args.tuner_seeds, args.trials = 1, 12
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    payload: dict[str, Any] = {"args": vars(args), "train": TRAIN, "held_out": HELD_OUT}
    if not args.no_transfer:
        payload["layout"] = BRIEF_LAYOUT
    if args.noise:
        payload["noise"] = noise(args.steps)
        for k, v in payload["noise"].items():
            if isinstance(v, dict):
                print(
                    f"noise {k}: seed sd {v['seed_sd']:.3f}, spread of means "
                    f"{v['spread_of_means']:.3f} ({v['ratio']:.1f}x)"
                )
    run = args.run or ("surrogates" if args.no_transfer else "transfer")
    spaces = args.priors.split(",")
    _check_spaces(spaces)
    if not args.no_transfer:
        machine = machine_info()
        payload["transfer"], payload["summary"] = [], _tuned_summary([])
        seeds = range(args.first_seed, args.first_seed + args.tuner_seeds)
        for s in seeds:
            for space in spaces:
                entry = transfer(s, args.trials, args.steps, args.held_out_seeds, space)
                payload["transfer"].append(entry)
                # saved as it goes: each tuner seed and space takes minutes
                payload["summary"] = round_floats(_tuned_summary(payload["transfer"]), 4)
                write_results(args.out, payload, run=run, dumps=compact_json, machine=machine)
        _print_transfer(payload["transfer"], payload["summary"])
    if args.surrogates:
        names = args.surrogates.split(",")
        seeds = range(args.first_seed, args.first_seed + args.tuner_seeds)
        runs = [surrogates(names, s, args.trials, args.steps) for s in seeds]
        payload["surrogates"] = runs
        _print_surrogates(runs, names, args.trials)
    path = write_results(args.out, payload, run=run, dumps=compact_json)
    print("wrote run", run, "of", path)


def _check_spaces(spaces: list[str]) -> None:
    """Refuse a ``--priors`` entry that is not ``PRIORS[:SURROGATE]`` before any study runs."""
    import structure  # noqa: F401 - registers the structured kind
    from tuner.kinds import surrogate_kinds

    kinds = ("auto", *surrogate_kinds())
    for space in spaces:
        priors, _, surrogate = space.partition(":")
        if priors not in ("family", "rules") or (surrogate and surrogate not in kinds):
            raise SystemExit(
                f"--priors takes PRIORS[:SURROGATE] entries with PRIORS family or rules and "
                f"SURROGATE one of {kinds}, got {space!r}; e.g. --priors family,family:flat."
            )


def _print_transfer(runs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    print("\nHeld-out median steps to the defaults' final hypervolume (ratio to the defaults'):")
    for priors in dict.fromkeys(r.get("space", "family") for r in runs):
        mine = [r for r in runs if r.get("space", "family") == priors]
        print(f"{priors + ' space, arm':34s} " + " ".join(f"{w:>22s}" for w in HELD_OUT))
        for arm in mine[0]["arms"]:
            cells = []
            for w in HELD_OUT:
                rs = [r["arms"][arm][w]["reach"] for r in mine]
                med = np.median([r[0] for r in rs])
                ratio = np.median([r[3] for r in rs])
                cells.append(f"{med:6.0f} ({ratio:.2f}x)")
            print(f"{arm:34s} " + " ".join(f"{c:>22s}" for c in cells))
        beat = sum(r["beats_defaults"] for r in mine)
        print(
            f"tuned configurations that beat the defaults on fresh training seeds: "
            f"{beat}/{len(mine)}\n"
        )
    for line in _summary_lines(summary):
        print(line)


def _tuned_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The tuned arm's steps ratio per space (``PRIORS[:SURROGATE]``) and held-out workload over
    tuner seeds: median with a 95% bootstrap interval (``{"ratio": {space: {workload:
    interval}}}``), and each other space's ratio minus ``family``'s, paired by tuner seed
    (``{"minus_family": {space: {workload: interval and Wilcoxon p}}}``)."""
    from rewrite.stats import interval

    out: dict[str, Any] = {"ratio": {}, "minus_family": {}}
    spaces = list(dict.fromkeys(r.get("space", "family") for r in runs))
    for w in HELD_OUT:
        got = {
            space: {
                r["tuner_seed"]: r["arms"]["tuned"][w]["reach"][3]
                for r in runs
                if r.get("space", "family") == space
            }
            for space in spaces
        }
        for space, by_seed in got.items():
            iv = interval(list(by_seed.values()), np.median).to_dict()
            out["ratio"].setdefault(space, {})[w] = {**iv, "tuner_seeds": len(by_seed)}
            seeds = sorted(set(by_seed) & set(got.get("family", {})))
            if space == "family" or len(seeds) < 2:
                continue
            mine = [by_seed[s] for s in seeds]
            theirs = [got["family"][s] for s in seeds]
            iv = interval(np.subtract(mine, theirs), np.median).to_dict()
            _, p = paired_test(mine, theirs)
            out["minus_family"].setdefault(space, {})[w] = {**iv, "p": p}
    return out


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["Tuned arm, steps ratio to the defaults' over tuner seeds (median, 95% interval):"]
    for kind in ("ratio", "minus_family"):
        for space, per in summary[kind].items():
            for w, iv in per.items():
                label = f"{space} - family, paired" if kind == "minus_family" else space
                tail = f"Wilcoxon p {iv['p']:.3g}" if "p" in iv else f"{iv['tuner_seeds']} seeds"
                lines.append(
                    f"  {w:6s} {label:28s} {iv['value']:.3g} [{iv['low']:.3g}, {iv['high']:.3g}]"
                    f" ({tail})"
                )
    return lines


def _print_surrogates(runs: list[dict[str, Any]], names: list[str], trials: int) -> None:
    ref = np.array([0.0, 0.0])
    print("\nSurrogates on the rewrite study (median over tuner seeds):")
    for name in names:
        cells = []
        for n in (10, 20, 40):
            if n <= trials:
                hv = np.median([_hv(r[name]["values"], n, ref) for r in runs])
                cells.append(f"HV@{n} {hv:.3f}")
        walls = [w for r in runs for w in r[name]["ask_wall"][10:]]
        cpus = [c for r in runs for c in r[name]["ask_cpu"][10:]]
        late = [c for r in runs for c in r[name]["ask_cpu"][-10:]]
        adopted = np.mean([m != "flat" for r in runs for m in r[name]["model"][10:]])
        print(
            f"  {name:12s} " + "  ".join(cells) + f"  proposal p50 {np.median(walls):.1f} s "
            f"wall, {np.median(cpus):.1f} s CPU (after the design), {np.median(late):.1f} s CPU "
            f"(last 10); network or SAAS in use {adopted:.0%}"
        )


if __name__ == "__main__":
    main()
