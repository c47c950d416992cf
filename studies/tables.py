"""Rich tables of a study's trials and Pareto set (for `tuner status` and `tuner run`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from studies.pareto import pareto_front
from studies.views import best_values

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from studies.study import Study

__all__ = ["pareto_table", "summary_line", "trials_table"]

_STATE_STYLE = {"COMPLETE": "green", "FAILED": "red", "RUNNING": "yellow", "WAITING": "cyan"}


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return " ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return "" if v is None else str(v)


def trials_table(study: Study, trials: Sequence[TrialRecord], last: int = 20) -> Table:
    """The last ``last`` trials (all if 0): number, state, objectives, duration, error."""
    shown = list(trials)[-last:] if last else list(trials)
    title = f"{study.name}: trials" + (f" (last {len(shown)} of {len(trials)})" if last else "")
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("state")
    for k, d in study.objectives.items():
        table.add_column(f"{k} ({d[:3]})", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("error", overflow="fold", max_width=60)
    for t in shown:
        style = _STATE_STYLE.get(t.state, "")
        vals = [_fmt((t.values or {}).get(k)) for k in study.objectives]
        dur = _fmt(t.duration) if t.duration is not None else ""
        table.add_row(str(t.number), f"[{style}]{t.state}[/]", *vals, dur, t.error or "")
    return table


def _top(weights: dict, k: int = 3) -> str:
    """The ``k`` heaviest parts of a simplex value, e.g. ``"fuse=0.41 merge=0.22 (+2 more)"``."""
    ranked = sorted(weights.items(), key=lambda kv: -kv[1])
    more = f" (+{len(ranked) - k} more)" if len(ranked) > k else ""
    return " ".join(f"{n}={_fmt(w)}" for n, w in ranked[:k]) + more


def pareto_table(study: Study, trials: Sequence[TrialRecord]) -> Table:
    """The Pareto set: number, objectives, the tuned parameters, and each simplex's top parts.

    `Fixed` parameters (the same in every trial) are left out.
    """
    from spaces import Fixed, Simplex

    front = pareto_front(trials, study.objectives, study.constraints)
    table = Table(title=f"{study.name}: Pareto set ({len(front)} trials)")
    table.add_column("#", justify="right")
    for k in study.objectives:
        table.add_column(k, justify="right")
    params = study.space.params
    simplexes = [n for n, p in params.items() if isinstance(p, Simplex)]
    scalars = [n for n, p in params.items() if not isinstance(p, Simplex | Fixed)]
    if scalars:
        table.add_column("parameters", overflow="fold", ratio=2)
    for name in simplexes:
        table.add_column(f"{name} (top 3)", overflow="fold", ratio=1)
    for t in front:
        cells = [_fmt(t.values[k]) for k in study.objectives]  # type: ignore[index]
        if scalars:
            cells.append(" ".join(f"{n}={_fmt(t.config.get(n))}" for n in scalars))
        cells += [_top(t.config[n]) for n in simplexes]
        table.add_row(str(t.number), *cells)
    return table


def summary_line(study: Study, trials: Sequence[TrialRecord]) -> str:
    """``"12/20 trials finished (11 COMPLETE, 1 FAILED), 0 running, 0 waiting; best ..."``."""
    counts = study.progress(trials)
    complete = sum(t.state == "COMPLETE" for t in trials)
    failed = sum(t.state == "FAILED" for t in trials)
    budget = study.budget
    of = f"/{budget}" if budget is not None else ""
    return (
        f"{counts['finished']}{of} trials finished ({complete} COMPLETE, {failed} FAILED), "
        f"{counts['running']} running, {counts['waiting']} waiting; {best_values(trials, study.objectives, study.constraints)}"
    )
