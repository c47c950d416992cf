"""Rich tables of a study's trials and Pareto set (for `tuner status` and `tuner run`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from studies.driver import best_values
from studies.pareto import pareto_front

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


def pareto_table(study: Study, trials: Sequence[TrialRecord]) -> Table:
    """The Pareto set: number, objectives, then every parameter of the config."""
    front = pareto_front(trials, study.objectives, study.constraints)
    table = Table(title=f"{study.name}: Pareto set ({len(front)} trials)")
    table.add_column("#", justify="right")
    for k in study.objectives:
        table.add_column(k, justify="right")
    names = list(study.space.names)
    for name in names:
        table.add_column(name, overflow="fold")
    for t in front:
        table.add_row(
            str(t.number),
            *[_fmt(t.values[k]) for k in study.objectives],  # type: ignore[index]
            *[_fmt(t.config.get(n)) for n in names],
        )
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
        f"{counts['running']} running, {counts['waiting']} waiting; {best_values(study, list(trials))}"
    )
