"""Rich tables of a study's trials and Pareto set (for `tuner status` and `tuner run`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from studies.pareto import pareto_front
from studies.views import best_values

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from studies.study import Study

__all__ = ["pareto_table", "summary_line", "transfer_lines", "trials_table"]

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


def _signed(d: dict) -> str:
    """A difference interval as ``+0.116 [+0.090, +0.140]``."""
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def transfer_lines(report: object) -> list[str | Table]:
    """The result of `studies.transfer.validate` for the console (fits 80 columns): the best
    trials' paired differences from the defaults on fresh training seeds, then the held-out
    comparison as a table."""
    r: Any = report
    if not r.candidates:
        return ["no tuned trial to compare with the defaults (only the defaults completed)"]
    seeds = len(r.training.seeds) if r.training else 0
    lines: list[str | Table] = [
        f"\nTuned on {', '.join(r.workloads)}. The best trials against the defaults on {seeds} "
        f"fresh\nseeds of {r.budget} steps (difference, 95% interval):"
    ]
    for c in r.candidates:
        mark = "->" if c["trial"] == r.chosen else "  "
        verdict = "beats the defaults" if c["beats"] else "does not beat them"
        for i, (k, v) in enumerate(c["training"].items()):
            head = f" {mark} trial {c['trial']:>3} {verdict:<18}" if i == 0 else " " * 33
            lines.append(f"{head}  {k:<12} {_signed(v)}")
    if r.held_out is None:
        return lines
    comp = r.held_out
    table = Table(
        title=f"Held out (never tuned on): trial {r.shown} vs the defaults, {len(comp.seeds)} "
        f"seeds of {comp.budget} steps",
        title_justify="left",
        caption="steps: median [95% interval] to reach the defaults' final hypervolume "
        f"({comp.budget + 1}: not within the budget); final HV (1 = the defaults' median) and "
        "latency reduction: tuned / defaults, means",
        caption_justify="left",
    )
    table.add_column("workload")
    for col in ("steps, tuned", "defaults", "ratio", "final HV", "latency red."):
        table.add_column(col, justify="right")
    for w, row in comp.per_workload.items():
        reach, hv, lat = row["reach"], row["final_hv"], row.get("latency_reduction")
        c = reach["candidate"]
        table.add_row(
            w,
            f"{c['value']:.0f} [{c['low']:.0f}, {c['high']:.0f}]",
            f"{reach['reference']['value']:.0f}",
            f"{reach['ratio']:.2f}x",
            f"{hv['candidate']['value']:.3f} / {hv['reference']['value']:.3f}",
            f"{100 * lat['candidate']['value']:.1f}% / {100 * lat['reference']['value']:.1f}%"
            if lat
            else "",
        )
    lines.append(table)
    ratio = comp.overall["reach_ratio"]["median"]
    lines.append(
        f"The tuned search reaches the defaults' final hypervolume in {ratio:.2f}x their steps "
        "(median over held-out workloads)."
    )
    return lines
