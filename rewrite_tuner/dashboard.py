"""The rewrite application's additions to ``tuner dashboard`` and ``tuner report``
(`studies.dashboard.Hooks`): the rule priors of an informed prior family as well as of a simplex,
the priors file a ``tuner demo`` run exported, the calibration and the validation in the time
split, and the held-out validation table.

What the study storage does not hold comes from the run's record (`rewrite_tuner.run_record`,
``<study>-run.json``), looked up in the SQLite database's folder, then in the current folder.
Before the demo's validation has run (or for a study no demo drove) the views say so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewrite_tuner.tables import held_out_cells
from studies.dashboard import markup as h
from studies.dashboard.hooks import Exported, Hooks, Panel, Phases
from studies.weights import WeightsOf

if TYPE_CHECKING:
    from studies.dashboard.snapshot import Snapshot

__all__ = ["HOOKS", "find_record", "validation_panel"]


def _priors_to_plot(space: Any, trial: Any, simplex: str | None) -> Any:
    from rewrite_tuner.export import priors_to_plot

    return priors_to_plot(space, trial, simplex)


#: The rule priors of a rewrite study (a Simplex or an informed prior family) and their words, as
#: ``tuner plot``, ``tuner dashboard`` and ``tuner report`` show them (``NAME-priors.png``).
RULE_PRIORS = WeightsOf(
    _priors_to_plot,
    part="rule",
    quantity="firing prior",
    file_suffix="priors",
    heading="Rule priors",
    about="Firing priors of the rules (the search's probability of trying each rule), largest "
    "first, the rest summed; the dashed line is the uniform prior. Click any trial number for "
    "that trial's priors.",
    missing="This study's space holds no rule priors (no Simplex parameter).",
)


def _folders(snap: Snapshot) -> list[Path]:
    """Where a study's run record may be: its SQLite database's folder, then the current one."""
    from sqlalchemy.engine import make_url

    out = []
    try:
        url = make_url(snap.url)
        if url.get_backend_name() == "sqlite" and url.database:
            out.append(Path(os.path.abspath(url.database)).parent)
    except Exception:  # noqa: BLE001 - a masked or odd URL: only the current folder
        pass
    cwd = Path.cwd()
    if cwd not in out:
        out.append(cwd)
    return out


def find_record(snap: Snapshot) -> tuple[Path, dict[str, Any]] | None:
    """The run record of ``snap``'s study and where it is, or None."""
    from rewrite_tuner.run_record import read_record, record_path

    key = "rewrite:record"
    if key not in snap.cache:
        found = None
        for folder in _folders(snap):
            path = record_path(folder, snap.name)
            doc = read_record(path, snap.name)
            if doc is not None:
                found = (path, doc)
                break
        snap.cache[key] = found
    return snap.cache[key]  # type: ignore[no-any-return]


def _exported(snap: Snapshot) -> Exported | None:
    got = find_record(snap)
    if got is None or not isinstance(got[1].get("exported"), dict):
        return None
    exp = got[1]["exported"]
    beats = exp.get("beats")
    note = (
        "beat the defaults with 95% confidence on fresh seeds"
        if beats
        else "exported anyway: it did not beat the defaults (--export-anyway)"
    )
    return Exported(int(exp["trial"]), str(exp.get("path", "")), note)


def _phases(snap: Snapshot) -> Phases:
    got = find_record(snap)
    if got is None:
        return Phases()
    path, doc = got
    before = {"calibration": float(doc["calibration"])} if "calibration" in doc else {}
    after = {"validation": float(doc["validation"])} if "validation" in doc else {}
    split = doc.get("split")
    measured = {k: float(v) for k, v in split.items()} if isinstance(split, dict) else None
    return Phases(before, after, measured, f"tuner demo's record {path}")


def validation_panel(snap: Snapshot) -> Panel | None:
    """The held-out validation: the best trials against the defaults on fresh seeds of the
    training suite, and the chosen one on held-out workloads (`rewrite_tuner.transfer`). None
    for a study that is not a rewrite study."""
    ctx = snap.record.context
    # the calibrated suite is in the context, or in a Fixed "suite" parameter before contexts
    if not (isinstance(ctx, dict) and "calibration" in ctx) and "suite" not in snap.space.params:
        return None
    got = find_record(snap)
    report = got[1].get("report") if got is not None else None
    if not isinstance(report, dict):
        text = (
            "No held-out validation yet: `tuner demo` checks the best trials against the defaults "
            "on fresh seeds and on held-out models after its last trial, and records it in "
            f"{snap.name}-run.json beside its priors file (looked for in "
            f"{', '.join(str(f) for f in _folders(snap))})."
        )
        return Panel("validation", "Held-out validation", h.note(text, "empty"))
    return Panel("validation", "Held-out validation", _report_html(report, got[0]), numbers=report)  # type: ignore[index]


def _signed(d: dict[str, Any]) -> str:
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _report_html(r: dict[str, Any], path: Path) -> str:
    """`rewrite_tuner.tables.transfer_lines` as HTML tables."""
    seeds = len((r.get("training") or {}).get("seeds", []))
    objectives = list(r.get("objectives", {}))
    rows = []
    for c in r.get("candidates", []):
        mark = "chosen" if c["trial"] == r.get("chosen") else ""
        verdict = "beats the defaults" if c["beats"] else "does not beat them"
        rows.append(
            [h.trial_link(c["trial"]), h.esc(verdict), *[h.esc(_signed(c["training"][k])) for k in objectives], mark]
        )  # fmt: skip
    body = h.note(
        f"Tuned on {', '.join(r.get('tuned_on', []))}; the best trials against the defaults on "
        f"{seeds} fresh seeds of {r.get('budget')} steps (difference, 95% interval). From {path}."
    )
    body += h.table(
        ["trial", "verdict", *objectives, ""], rows, cls="validation", empty="no candidate"
    )
    comp = r.get("held_out_comparison")
    shown = (
        r.get("chosen")
        if r.get("chosen") is not None
        else (r.get("candidates") or [{}])[0].get("trial")
    )
    if not comp:
        return body + h.note("No held-out workload was checked.", "empty")
    budget = comp["budget"]
    body += (
        f"<h3>Held out (never tuned on): trial {h.esc(shown)} vs the defaults, "
        f"{len(comp['seeds'])} seeds of {budget} steps</h3>"
    )
    hrows = []
    for w, row in comp["per_workload"].items():
        hrows.append([h.esc(w), *held_out_cells(row)])
    headers = ["workload", "steps, tuned", "defaults", "ratio", "final HV", "latency red."]
    body += h.table(headers, hrows, cls="heldout")
    ratio = comp["overall"]["reach_ratio"]["median"]
    body += h.note(
        f"Steps: median [95% interval] to reach the defaults' final hypervolume ({budget + 1}: "
        "not within the budget); final HV (1 = the defaults' median) and latency reduction: "
        f"tuned / defaults, means. The tuned search reaches the defaults' final hypervolume in "
        f"{ratio:.2f}x their steps (median over held-out workloads)."
    )
    return body


#: The hooks `rewrite_tuner.cli` registers ``tuner dashboard`` and ``tuner report`` with.
HOOKS = Hooks(
    weights_of=RULE_PRIORS,
    exported=_exported,
    phases=_phases,
    panels=(validation_panel,),
)
