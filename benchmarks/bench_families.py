"""Defaults judged where nobody tuned: ``auto`` against the flat GP, and warm start against a cold
study, on problem families split once into design and test members (`benchmarks._families`).

The rule: every default of ``auto`` and of warm start is chosen on the design split only; the test
split (`_families.SPLIT`, committed before any run) is run after the defaults are committed, to
report, never to choose again.

Two kinds of run, each saved row by row (one JSON file per member x arm x seed under
``benchmarks/rows/bench_families/``, committed; an interrupted run resumes where it stopped)
and merged by ``report`` into ``benchmarks/results/bench_families.json``, which keeps, marked
``carried``, the figures of members and arms it finds no rows for:

* ``structure``: a tuner per member, arm and seed (`run_structure`), one trial at a time, the
  acquisition at ``bench_structure --quick``'s budget (`OPTIONS`); arms ``flat`` (the tuner's own
  GP) and ``auto`` (the surrogate a study's ``auto`` builds once trials report metrics,
  `studies.tuning.make_surrogate`); ``auto+FIELD=VALUE+...`` overrides `StructuredConfig` fields
  (``auto+veto=none``; a dotted field reaches a nested one, ``auto+learn.select.keep_base=true``);
  ``stated`` is ``auto`` told the member's true DAG, as a user states a structure
  (`StudySettings.structure`: the network is still scored against the flat GP), ``stated+...``
  with overrides.
  Recorded: the hypervolume of the noise-free objectives after every trial, proposal CPU
  seconds, the network's share of the proposals.
* ``warm``: studies through the `studies.Study` API (`run_warm`): per pair, a source study (the
  cold study with seed 100, 25 trials) run once; then per seed ``cold`` (a study on the target,
  default settings) and ``warm`` (the same with ``warm_start`` naming the source);
  ``warm+FIELD=VALUE+...`` overrides `StudySettings` fields. The targets report objectives only,
  so ``auto`` is the flat GP in both arms.
* ``looks``: no study beyond the cold one's first trials (`rank_looks`): how often a pair's
  source orders the target's first ``k`` trials alike, the look `StudySettings.warm_start_rank`
  takes, per relation (``--looks 3,4,5,6``); saved under ``looks`` in ``bench_families.json``.

Usage::

    python -m benchmarks.bench_families structure --split design --arms flat,auto --seeds 0-4
    python -m benchmarks.bench_families warm --split design --arms cold,warm --seeds 0-9
    python -m benchmarks.bench_families report          # merge rows, print tables
    python -m benchmarks.bench_families looks --split design --seeds 0-9   # the rank rule's looks

``--shard I/N`` runs every N-th member from the I-th (two processes on two cores); ``--members``
names some members of the split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import (
    RESULTS_DIR,
    compact_json,
    machine_info,
    round_floats,
    write_results,
)
from benchmarks._families import SPLIT, member, warm_pair
from benchmarks._structure_results import hypervolume
from tuner.options import TunerOptions

ROWS = RESULTS_DIR.parent / "rows" / "bench_families"
OPTIONS = TunerOptions(
    num_restarts=4, raw_samples=128, maxiter=50, mc_samples=64, start_with_default=False
)
"""The structure runs' acquisition budget (`bench_structure.QUICK_OPTIONS`)."""
WARM_OPTIONS = {"num_restarts": 4, "raw_samples": 128, "maxiter": 50, "mc_samples": 64}
"""The warm runs' acquisition budget (`StudySettings.tuner_options`; the design starts with the
space's default, as a study's does)."""
SOURCE_TRIALS, SOURCE_SEED = 25, 100
AT = {"structure": (10, 20, 30, 40), "warm": (5, 10, 20, 30)}


def _safe(name: str) -> str:
    return name.replace("/", "_").replace("@", "_at_").replace("+", "_")


def row_path(kind: str, name: str, arm: str, seed: int) -> Path:
    """Where the row of ``kind`` (``structure``/``warm``), member, arm and seed is saved."""
    return ROWS / kind / _safe(name) / _safe(arm) / f"{seed}.json"


def _save_row(path: Path, row: dict[str, Any]) -> None:
    from rewrite.serialize import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    row = {
        **row,
        "load": [round(v, 2) for v in os.getloadavg()],
        "commit": machine_info()["commit"],
    }
    write_text_atomic(path, json.dumps(round_floats(row)) + "\n")


def _overrides(pairs: Sequence[str], cls: type) -> dict[str, Any]:
    """``["veto=none", "tolerance=1"]`` as keyword arguments of ``cls`` (numbers, bools, none,
    or a string)."""
    out: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in names:
            raise SystemExit(f"{cls.__name__} has no field {key!r} (arm override {pair!r})")
        out[key] = _value(value)
    return out


def _replaced(obj: Any, pairs: Sequence[str]) -> Any:
    """``obj`` (a dataclass) with ``pairs`` applied; a dotted key reaches a nested dataclass
    (``learn.select.keep_base=true``)."""
    flat = [p for p in pairs if "." not in p.partition("=")[0]]
    obj = dataclasses.replace(obj, **_overrides(flat, type(obj)))
    for pair in (p for p in pairs if "." in p.partition("=")[0]):
        head, _, rest = pair.partition(".")
        inner = getattr(obj, head, None)
        if not dataclasses.is_dataclass(inner):
            raise SystemExit(
                f"{type(obj).__name__}.{head} holds no options (arm override {pair!r})"
            )
        obj = dataclasses.replace(obj, **{head: _replaced(inner, [rest])})
    return obj


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("none", "true", "false"):
        return {"none": None, "true": True, "false": False}[low]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# ---------------------------------------------------------------------------------- structure
def structure_surrogate(arm: str, problem: Any) -> Any:
    """The surrogate of a structure arm (module docstring)."""
    from studies.settings import StudySettings
    from studies.tuning import make_surrogate
    from tuner.surrogate import FlatSurrogate

    base, *pairs = arm.split("+")
    if base == "flat" and not pairs:
        return FlatSurrogate({"maxiter": OPTIONS.fit_maxiter})
    if base not in ("auto", "stated") or (base == "stated" and not problem.true_edges):
        raise SystemExit(
            "structure arms are flat, auto, stated (on members with a known DAG) or "
            f"auto+FIELD=VALUE..., got {arm!r} on {problem.name!r}"
        )
    stated = [list(e) for e in problem.true_edges] if base == "stated" else None
    settings = StudySettings(ignore_metrics=problem.ignore_metrics, structure=stated)
    surrogate = make_surrogate("structured", settings)
    surrogate.config = _replaced(surrogate.config, pairs)
    return surrogate


def run_structure(name: str, arm: str, seed: int, trials: int) -> dict[str, Any]:
    """One tuner run of ``arm`` on member ``name`` with seed ``seed``."""
    import torch

    from tuner import Tuner

    problem = member(name)
    surrogate = structure_surrogate(arm, problem)
    tuner = Tuner(
        problem.space, dict(problem.objectives), seed=seed, surrogate=surrogate, options=OPTIONS
    )
    rng = np.random.default_rng(seed)
    Y, cpu, models = [], [], []
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    for _ in range(trials):
        c0 = time.process_time()
        (trial,) = tuner.ask(1)
        cpu.append(time.process_time() - c0)
        values, metrics = problem.evaluate(trial.config, rng)
        tuner.tell(trial.id, values, metrics=metrics)
        clean = problem.evaluate(trial.config, None)[0] if problem.noisy else values
        Y.append(problem.maximized(clean))
        info = tuner.last_fit.description if tuner.last_fit is not None else {}
        models.append(info.get("model", "flat"))
    hv = [hypervolume(np.array(Y[:n]), problem.ref) for n in range(1, trials + 1)]
    return {
        "kind": "structure", "member": name, "arm": arm, "seed": seed, "trials": trials,
        "hv": hv, "cpu_s": sum(cpu), "wall_s": time.perf_counter() - t_start,
        "network_share": float(np.mean([m == "network" for m in models])),
    }  # fmt: skip


# ---------------------------------------------------------------------------------- warm
def _study_values(problem: Any, study: Any) -> list[list[float] | None]:
    """The noise-free objectives (maximization convention) of ``study``'s trials in order."""
    out: list[list[float] | None] = []
    for t in sorted(study.trials, key=lambda t: t.number):
        out.append(problem.maximized(problem.evaluate(t.config, None)[0]) if t.values else None)
    return out


def _optimize(study: Any, trials: int) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return study.optimize(trials, executor=pool, progress=False)


def _evaluate(problem: Any, seed: int) -> Any:
    """``problem``'s evaluation as a study calls it (config -> values), noise seeded."""
    rng = np.random.default_rng(seed)
    return lambda config: problem.evaluate(config, rng)[0]


def source_db(pair: str) -> Path:
    """The pair's source study (25 trials of a cold study, seed 100), run once and kept."""
    from studies import Study, StudySettings

    path = ROWS / "warm_sources" / f"{_safe(pair)}.db"
    done = path.with_suffix(".done")
    if done.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    p = warm_pair(pair)
    settings = StudySettings(tuner_options=WARM_OPTIONS)
    study = Study(
        "source", p.source.space, dict(p.source.objectives), _evaluate(p.source, SOURCE_SEED),
        storage=f"sqlite:///{path}", seed=SOURCE_SEED, settings=settings,
    )  # fmt: skip
    _optimize(study, SOURCE_TRIALS)
    done.write_text("")
    return path


def run_warm(pair: str, arm: str, seed: int, trials: int) -> dict[str, Any]:
    """One study of ``arm`` (``cold``, ``warm``, ``warm+FIELD=VALUE...``) on the pair's target."""
    from studies import Study, StudySettings

    p = warm_pair(pair)
    base, *pairs = arm.split("+")
    fields = {"tuner_options": WARM_OPTIONS, **_overrides(pairs, StudySettings)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if base == "warm":
            src = Path(tmp) / "source.db"
            shutil.copy(source_db(pair), src)  # opening a study may write to its storage
            fields["warm_start"] = [{"study": "source", "storage": f"sqlite:///{src}"}]
        elif base != "cold":
            raise SystemExit(f"warm arms are cold, warm or warm+FIELD=VALUE..., got {arm!r}")
        study = Study(
            "target", p.target.space, dict(p.target.objectives), _evaluate(p.target, seed),
            storage=f"sqlite:///{Path(tmp) / 'target.db'}", seed=seed,
            settings=StudySettings(**fields),
        )  # fmt: skip
        stats = _optimize(study, trials)
        values = _study_values(p.target, study)
        tuner = next(iter(study._tuners.values()), None)
        fitted = tuner.last_fit if tuner is not None else None
        last = dict(fitted.description) if fitted is not None else {}
    ok = [v for v in values if v is not None]
    hv = [
        hypervolume(np.array([v for v in values[:n] if v]), p.target.ref)
        for n in range(1, trials + 1)
    ]
    return {
        "kind": "warm", "member": pair, "arm": arm, "seed": seed, "trials": trials, "hv": hv,
        "n_ok": len(ok), "proposing_s": stats.proposing, "wall_s": time.perf_counter() - t0,
        "last_fit": {
            k: v for k, v in last.items() if k in ("model", "weights", "related", "gate", "look")
        },
    }  # fmt: skip


def rank_looks(pair: str, seeds: Sequence[int], ks: Sequence[int]) -> list[list[float]]:
    """Per seed, for each ``k`` in ``ks``, the share of the pairs of the target's first ``k``
    trials (the cold study's with that seed) that the pair's source orders alike on every
    objective (its own GP, `tuner.warmstart.task_model`, fitted once): what
    `StudySettings.warm_start_rank` judges, without running the warm study. NaN where a trial
    failed or no pair differs."""
    from studies import Study, StudySettings
    from studies.warmstart import related_tasks
    from tuner.warmstart import rank_agreement, task_model

    p = warm_pair(pair)
    nan, out, model = float("nan"), [], None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "source.db"
        shutil.copy(source_db(pair), src)
        related = [{"study": "source", "storage": f"sqlite:///{src}"}]

        def study(name: str, seed: int, **fields: Any) -> Any:
            return Study(
                name, p.target.space, dict(p.target.objectives), _evaluate(p.target, seed),
                storage=f"sqlite:///{Path(tmp) / name}.db", seed=seed,
                settings=StudySettings(tuner_options=WARM_OPTIONS, **fields),
            )  # fmt: skip

        task = related_tasks(study("warm", 0, warm_start=related, warm_start_queue=0))[0]
        for seed in seeds:
            cold = study(f"cold{seed}", seed)
            _optimize(cold, max(ks))
            done = sorted((t for t in cold.trials if t.values), key=lambda t: t.number)
            data = cold.problem.training_data(cold.space, done, 0)
            model = model or task_model(task, data, {}, 100)  # the source's data: one fit
            out.append([nan if (v := rank_agreement(model, data, k)) is None else v for k in ks])
    return out


def looks(split: str, seeds: Sequence[int], ks: Sequence[int], members: Sequence[str]) -> None:
    """`rank_looks` over the split's warm pairs: per relation and ``k``, how often the share is
    at least `tuner.warmstart.AGREEMENT` (the rank rule passes), printed and saved under
    ``looks`` in ``benchmarks/results/bench_families.json`` (`report` carries it)."""
    from benchmarks._families import RELATIONS
    from tuner.warmstart import AGREEMENT

    pairs = [m for m in SPLIT["warm"][split] if not members or m in members]
    shares = {pair: rank_looks(pair, seeds, ks) for pair in pairs}
    table: dict[str, dict[str, list[int]]] = {}
    for relation in RELATIONS:
        rows = [r for pair, rs in shares.items() if pair.endswith("/" + relation) for r in rs]
        if rows:
            table[relation] = {
                str(k): [sum(r[i] >= AGREEMENT for r in rows), sum(r[i] == r[i] for r in rows)]
                for i, k in enumerate(ks)
            }
            cells = " ".join(f"k={k} {a:3d}/{b:<3d}" for k, (a, b) in table[relation].items())
            print(f"{relation:11s} {cells}")
    path = RESULTS_DIR / "bench_families.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["looks"] = {
        "split": split, "seeds": seed_ranges(list(seeds)), "agreement": AGREEMENT,
        "pairs": pairs, "passes_of_looks": table, "machine": machine_info(),
    }  # fmt: skip
    machine = doc.pop("machine", None) or machine_info()  # the report's, kept
    write_results("bench_families", doc, machine=machine, dumps=compact_json)


def _warm_jobs(pairs: Sequence[str], arms: Sequence[str]) -> list[tuple[str, str]]:
    """(pair, arm) jobs: ``cold`` once per target (it does not depend on the source; stored
    under the pair's target ``warm/<seed>``), the other arms per pair."""
    jobs: list[tuple[str, str]] = []
    for pair in pairs:
        target = pair.rsplit("/", 1)[0]
        for arm in arms:
            job = (target + "/identical", arm) if arm == "cold" else (pair, arm)
            if job not in jobs:
                jobs.append(job)
    return jobs


# ---------------------------------------------------------------------------------- driver
def _seeds(text: str) -> list[int]:
    """``"0-4"`` or ``"0,3,5"`` -> seeds."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``"0-3,5"``: the inverse of `_seeds` (what ``--seeds`` reads)."""
    runs: list[list[int]] = []
    for s in sorted(seeds):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in runs)


def run(args: argparse.Namespace) -> None:
    family = {"structure": ("search", "network", "rewrite"), "warm": ("warm",)}[args.kind]
    names = [m for f in family for m in SPLIT[f][args.split]]
    if args.members:
        wanted = args.members.split(",")
        names = [m for m in names if m in wanted or m.split("/")[0] + "/" in wanted]
    elif args.kind == "structure":
        names = [m for m in names if not m.startswith("rewrite")]  # only when named
    i, n = (int(v) for v in args.shard.split("/"))
    arms = args.arms.split(",")
    if args.kind == "warm":
        targets = sorted({p.rsplit("/", 1)[0] for p in names})[i::n]
        jobs = _warm_jobs([p for p in names if p.rsplit("/", 1)[0] in targets], arms)
    else:
        jobs = [(m, a) for m in names[i::n] for a in arms]
    runner = run_structure if args.kind == "structure" else run_warm
    for seed in _seeds(args.seeds):  # seed-major: a run cut short holds whole seeds
        for name, arm in jobs:
            path = row_path(args.kind, name, arm, seed)
            if path.exists():
                continue
            row = runner(name, arm, seed, args.trials)
            _save_row(path, row)
            at = AT[args.kind]
            print(
                f"{name:28s} {arm:24s} seed {seed:2d} "
                + " ".join(f"@{t} {row['hv'][t - 1]:.4g}" for t in at if t <= len(row["hv"]))
                + f"  {row.get('cpu_s', row.get('proposing_s', 0)):.0f} s",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=("structure", "warm", "report", "looks"))
    parser.add_argument("--split", choices=("design", "test"), default="design")
    parser.add_argument("--arms", default=None, help="comma-separated (module docstring)")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,2,4")
    parser.add_argument("--trials", type=int, default=None, help="structure 40, warm 30")
    parser.add_argument("--members", default=None, help="members of the split, by comma")
    parser.add_argument("--shard", default="0/1", help="I/N: every N-th member from the I-th")
    parser.add_argument("--looks", default="3,4,5,6", help="looks: the first k trials judged")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.kind == "report":
        from benchmarks._families_report import report

        report()
        return
    if args.kind == "looks":
        members = args.members.split(",") if args.members else ()
        looks(args.split, _seeds(args.seeds), [int(k) for k in args.looks.split(",")], members)
        return
    args.arms = args.arms or ("flat,auto" if args.kind == "structure" else "cold,warm")
    args.trials = args.trials or (40 if args.kind == "structure" else 30)
    run(args)


if __name__ == "__main__":
    main()
