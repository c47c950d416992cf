"""The result of `rewrite_tuner.transfer.validate` for the console (`tuner demo`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = ["held_out_cells", "transfer_lines"]


def _signed(d: dict) -> str:
    """A difference interval as ``+0.116 [+0.090, +0.140]``."""
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def held_out_cells(row: dict[str, Any]) -> list[str]:
    """One held-out workload's cells after its name: steps to the defaults' final hypervolume
    (tuned, with its interval), the defaults' steps, their ratio, final hypervolume and latency
    reduction (tuned / defaults). The terminal table and the dashboard show the same cells."""
    reach, hv, lat = row["reach"], row["final_hv"], row.get("latency_reduction")
    c = reach["candidate"]
    return [
        f"{c['value']:.0f} [{c['low']:.0f}, {c['high']:.0f}]",
        f"{reach['reference']['value']:.0f}",
        f"{reach['ratio']:.2f}x",
        f"{hv['candidate']['value']:.3f} / {hv['reference']['value']:.3f}",
        f"{100 * lat['candidate']['value']:.1f}% / {100 * lat['reference']['value']:.1f}%"
        if lat
        else "",
    ]


def transfer_lines(report: object) -> list[str | Table]:
    """The result of `rewrite_tuner.transfer.validate` for the console (fits 80 columns): the best
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
        table.add_row(w, *held_out_cells(row))
    lines.append(table)
    ratio = comp.overall["reach_ratio"]["median"]
    lines.append(
        f"The tuned search reaches the defaults' final hypervolume in {ratio:.2f}x their steps "
        "(median over held-out workloads)."
    )
    return lines
