"""The dashboard's views of the model and of the run: a Simplex's weights (in the application's
words), structure and surrogate,
running trials, failures, the time split, and one trial's view (see `studies.dashboard.views`)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from typing import Any

from studies.dashboard import markup as h
from studies.dashboard.hooks import Exported, Hooks, Panel, Phases
from studies.dashboard.snapshot import Snapshot
from studies.errors import StudyError
from studies.records import TrialRecord
from studies.weights import SIMPLEX, WeightsOf

__all__ = [
    "estimate_split",
    "failures_panel",
    "running_panel",
    "structure_panel",
    "structure_summary",
    "time_panel",
    "trial_detail",
    "weights_panel",
]


# ---------------------------------------------------------------------- weights
def _words(hooks: Hooks) -> WeightsOf:
    """The application's reader and words for a trial's weights (default: a Simplex's)."""
    return hooks.weights_of or SIMPLEX


def _weights(
    snap: Snapshot, hooks: Hooks, trial: TrialRecord
) -> tuple[str, dict[str, float]] | None:
    """``(title, weights)`` of ``trial`` (None: the space holds no weights)."""
    return _words(hooks).read(snap.space, trial, None)


def exported_trial(snap: Snapshot, hooks: Hooks) -> Exported | None:
    """The trial whose priors the study exported (`Hooks.exported`), else the one the default pick
    of ``tuner export`` chooses; None before any feasible trial."""
    from studies.pareto import choose_trial

    if hooks.exported is not None:
        got = hooks.exported(snap)
        if got is not None:
            return got
    try:
        trial, rule = choose_trial(list(snap.trials), snap.objectives, snap.constraints, None)
    except StudyError:
        return None
    return Exported(trial.number, "", f"the default pick of `tuner export`: {rule}")


def weights_panel(snap: Snapshot, hooks: Hooks) -> Panel:
    """Bars of the weights of the exported trial and of the latest completed trial (every
    trial's view has its own), in the application's words (`studies.weights.WeightsOf`)."""
    words = _words(hooks)
    complete = [t for t in snap.trials if t.state == "COMPLETE"]
    if not complete:
        return Panel("priors", words.heading, h.note("No trial has completed yet.", "empty"))
    if _weights(snap, hooks, complete[-1]) is None:
        return Panel("priors", words.heading, h.note(words.missing, "empty"))
    by_number = {t.number: t for t in snap.trials}
    shown: list[tuple[str, TrialRecord, str]] = []
    exp = exported_trial(snap, hooks)
    if exp is not None and exp.trial in by_number:
        label = (
            f"exported to {exp.source}: trial {exp.trial}"
            if exp.source
            else f"to export (nothing exported yet): trial {exp.trial}"
        )
        shown.append((label, by_number[exp.trial], exp.note))
    if exp is None or exp.trial != complete[-1].number:
        shown.append((f"latest completed: trial {complete[-1].number}", complete[-1], ""))
    figures, body = [], []
    numbers: dict[str, Any] = {}
    for i, (label, trial, line) in enumerate(shown):
        title, weights = _weights(snap, hooks, trial)  # type: ignore[misc]
        fig, height = h.bars(f"priors-{i}", weights, part=words.part, quantity=words.quantity)
        figures.append(fig)
        body.append(
            f"<div><h3>{h.esc(label)} {h.trial_link(trial.number)}</h3>"
            + h.note(f"{title}" + (f"; {line}" if line else ""))
            + h.div(f"priors-{i}", height)
            + "</div>"
        )
        numbers["latest" if label.startswith("latest") else "exported"] = trial.number
    return Panel(
        "priors", words.heading,
        h.note(words.about) + '<div class="cols">' + "".join(body) + "</div>",
        tuple(figures), numbers,
    )  # fmt: skip


# ---------------------------------------------------------------------- structure
def structure_summary(snap: Snapshot) -> dict[str, Any]:
    """Which surrogate the study's next proposal uses and why (cheap: no fit), as
    ``{"mode", "why", "initial", "complete"}``."""
    from fnmatch import fnmatch

    from studies.settings import StudySettings
    from studies.tuning import model_kind
    from tuner.problem import SEM_SUFFIX, Problem

    settings = StudySettings.from_dict(snap.record.settings)
    problem = Problem(snap.objectives, snap.constraints)
    complete = [t for t in snap.trials if t.state == "COMPLETE"]
    mode = model_kind(settings, problem.constraint_metrics, complete)
    told = set(problem.constraint_metrics)
    tracking = sorted(
        k
        for k in {k for t in complete for k in t.metrics} - told
        if not k.endswith(SEM_SUFFIX) and not any(fnmatch(k, p) for p in settings.ignore_metrics)
    )
    if settings.warm_start:
        names = ", ".join(w["study"] for w in settings.warm_start)  # stored as dicts
        why = (
            f"warm-started from {names}, so the model is the warm-start "
            f"one ({mode}; it replaces surrogate=...): those studies' trials inform it as "
            "related tasks while they predict this study's trials better than a flat GP. "
            + _warm_rule(settings)
        )
    elif settings.surrogate != "auto":
        why = f"the study's settings fix surrogate={settings.surrogate!r}."
    elif mode == "structured":
        some = ", ".join(tracking[:4]) + (
            f" and {len(tracking) - 4} more" if len(tracking) > 4 else ""
        )
        why = (
            f"completed trials report {len(tracking)} tracking metrics the structured surrogate "
            f"models ({some}) besides the objectives, so "
            "surrogate='auto' uses the structured surrogate: a GP network from the parameters "
            "through every metric to the objectives while it orders held-out trials at least as "
            "well as a flat GP, else the flat GP."
        )
    elif complete:
        why = "no completed trial reports a tracking metric, so surrogate='auto' uses a flat GP."
    else:
        why = "no trial has completed yet; surrogate='auto' decides once one has."
    n_initial = settings.n_initial
    initial = (
        f"the initial design: {n_initial} trials before any model"
        if n_initial is not None
        else "the initial design: the tuner's default size"
    )
    return {"mode": mode, "why": why, "initial": initial, "complete": len(complete)}


def _warm_rule(settings: Any) -> str:
    """What a warm-started study's `StudySettings` do with the related studies' best
    configurations, in words."""
    queue, suggest, rank = (
        settings.warm_start_queue, settings.warm_start_suggest, settings.warm_start_rank
    )  # fmt: skip
    said = [f"Their {queue} best each were queued as the first trials."] if queue else []
    if suggest and rank:
        said.append(
            f"Their {suggest} best each are proposed once that study orders this one's first "
            f"{rank} trials as they came out (one look, after trial {rank})."
        )
    elif suggest:
        said.append(
            f"Their {suggest} best each are proposed once the model keeps that study or its "
            "best, tried here, is on this study's Pareto front."
        )
    return " ".join(said) or "None of their configurations is tried as such."


def structure_panel(snap: Snapshot, learned: dict[str, Any] | None = None) -> Panel:
    """The surrogate in use and why; the learned structure is filled in by the page from the
    background fit (``learned``: its result, given when the report is written)."""
    s = structure_summary(snap)
    body = (
        f'<p><b>Surrogate for the next proposal:</b> <span data-num="surrogate">'
        f"{h.esc(s['mode'])}</span>. Why: {h.esc(s['why'])}</p>"
        + h.note(f"Model-based proposals start after {s['initial']}.")
    )
    if s["mode"] != "structured":
        model = "The flat GP" if s["mode"] == "flat" else "This model"
        body += h.note(f"{model} learns no structure; nothing more to draw.", "empty")
        return Panel("structure", "Structure", body, numbers=s)
    inner = learned_html(learned) if learned is not None else h.note("Learning the structure...")
    done = ' data-done="1"' if learned is not None else ""
    body += f'<div id="structure-fit"{done}>{inner}</div>'
    return Panel("structure", "Structure", body, numbers=s)


def learned_html(fit: dict[str, Any]) -> str:
    """The learned structure: `structure.explain` of the fit and its drawing (a PNG), or the
    fit's state (running, failed)."""
    state = fit.get("state")
    if state == "running":
        return (
            f'<p class="note">Learning the structure from {fit.get("complete", "?")} completed '
            "trials in a background process at low priority (started "
            f"{h.age(fit.get('started'))} ago; a minute or two for a few dozen trials, as "
            "`tuner structure`).</p>"
        )
    if state == "error":
        return h.note(f"Learning the structure failed: {fit.get('error')}", "warn")
    if state != "done":
        return h.note("Learning the structure...")
    text = f'<pre class="explain">{h.esc(fit.get("explain", ""))}</pre>'
    png = fit.get("png")
    img = (
        f'<img class="dag" alt="structure of the surrogate" src="data:image/png;base64,{png}">'
        if png
        else h.note("No structure was learned (too few trials, or no tracking metric).", "empty")
    )
    again = "" if fit.get("final") else "; refitted as trials complete"
    when = h.note(
        f"Fitted on the {fit.get('complete')} trials completed at the time, in "
        f"{fit.get('seconds', 0):.0f} s, with the study's own structure settings (as `tuner "
        f"structure` does){again}."
    )
    return text + img + when


# ---------------------------------------------------------------------- the run
def _grace(snap: Snapshot) -> float:
    try:
        from studies.settings import StudySettings

        return float(StudySettings.from_dict(snap.record.settings).grace_period)
    except StudyError:
        return 60.0


def running_panel(snap: Snapshot) -> Panel:
    """RUNNING trials with their worker, start and heartbeat ages; the WAITING queue; the
    proposals drivers are computing now."""
    grace = _grace(snap)
    running = [t for t in snap.trials if t.state == "RUNNING"]
    rows = [
        [
            h.trial_link(t.number),
            h.esc(t.worker or "(by hand)"),
            h.age(t.started),
            h.age(t.heartbeat).replace('class="age"', f'class="age" data-warn="{grace:g}"')
            if t.heartbeat is not None
            else "none (told by hand)",
            f"#{t.retry_of}" if t.retry_of is not None else "",
        ]
        for t in running
    ]
    body = "<h3>Running</h3>" + h.table(
        ["trial", "worker", "running for", "last heartbeat", "re-runs"], rows,
        empty="no trial is running",
    )  # fmt: skip
    body += h.note(
        f"A heartbeat older than the grace period ({grace:g} s) turns red: the next driver to "
        "allocate declares the trial stale, FAILED, and re-queues its configuration."
    )
    waiting = [t for t in snap.trials if t.state == "WAITING"]
    wrows = [
        [h.trial_link(t.number), h.age(t.created), f"#{t.retry_of}" if t.retry_of is not None else "queued"]
        for t in waiting
    ]  # fmt: skip
    body += "<h3>Waiting</h3>" + h.table(
        ["trial", "queued for", "re-runs"], wrows, empty="no trial is waiting"
    )
    rrows = [
        [str(r.position), h.esc(r.worker), h.age(r.created), h.age(r.heartbeat)]
        for r in snap.reservations
    ]
    body += "<h3>Proposals being computed</h3>" + h.table(
        ["position", "driver", "for", "last heartbeat"], rrows, empty="none"
    )
    numbers = {"running": [t.number for t in running], "waiting": [t.number for t in waiting]}
    return Panel("running", f"Running ({len(running)})", body, numbers=numbers)


def failures_panel(snap: Snapshot) -> Panel:
    """FAILED trials, newest first, with their error, worker and what re-ran them."""
    failed = [t for t in reversed(snap.trials) if t.state == "FAILED"]
    rerun = {t.retry_of: t.number for t in snap.trials if t.retry_of is not None}
    rows = [
        [
            h.trial_link(t.number),
            f'<pre class="error">{h.esc(t.error or "(no message)")}</pre>',
            h.esc(t.worker or ""),
            h.fmt(t.duration),
            h.trial_link(rerun[t.number]) if t.number in rerun else "",
        ]
        for t in failed
    ]
    body = h.table(
        ["trial", "error", "worker", "seconds", "re-run as"], rows, cls="failures",
        empty="no trial has failed",
    )  # fmt: skip
    numbers = {"failed": [t.number for t in failed]}
    return Panel("failures", f"Failures ({len(failed)})", body, numbers=numbers)


def estimate_split(snap: Snapshot, now: float | None = None) -> dict[str, Any]:
    """Where a study's tuning time went, estimated from its stored times (no process records
    its proposal times in the storage).

    A driving process proposes a trial after a worker slot frees, and inserts it when the
    proposal is done: a proposed trial (inserted RUNNING, not a re-run) was being proposed from
    the later of the last trial that finished before it and that driver's previous proposal,
    until it was inserted. Trials inserted together (one batch) count once. The first proposal
    of each driving process has no known start; it counts as the median of the others.

    Returns:
        ``{"wall": tuning wall seconds (first trial to last finish, or now), "proposals": seconds
        proposing (summed over driving processes), "evaluations": wall - proposals, "worker":
        the trials' worker seconds, "drivers": number of driving processes}``.
    """
    trials = sorted(snap.trials, key=lambda t: t.created)
    if not trials:
        return {"wall": 0.0, "proposals": 0.0, "evaluations": 0.0, "worker": 0.0, "drivers": 0}
    now = snap.read_at if now is None else now
    finishes = sorted(t.finished for t in trials if t.finished is not None)
    proposed = [
        t for t in trials
        if t.retry_of is None and t.started is not None and abs(t.started - t.created) < 1e-6
    ]  # fmt: skip
    by_driver: dict[str, list[TrialRecord]] = {}
    for t in proposed:
        by_driver.setdefault(t.worker or "", []).append(t)
    known: list[float] = []
    unknown = 0
    for ts in by_driver.values():
        prev: float | None = None
        for t in ts:
            if prev is not None and t.created - prev < 0.05:
                continue  # the same batch
            i = bisect.bisect_right(finishes, t.created)
            starts = [x for x in (finishes[i - 1] if i else None, prev) if x is not None]
            if prev is None:
                unknown += 1
            else:
                known.append(max(0.0, t.created - max(starts)))
            prev = t.created
    proposals = sum(known) + unknown * (statistics.median(known) if known else 0.0)
    end = max(
        [t.finished for t in trials if t.finished is not None]
        + [now for t in trials if t.state == "RUNNING"]
        or [trials[-1].created]
    )
    wall = max(0.0, end - trials[0].created)
    worker = sum(t.duration or 0.0 for t in trials if t.state.is_finished)
    return {
        "wall": wall,
        "proposals": min(proposals, wall),
        "evaluations": max(0.0, wall - proposals),
        "worker": worker,
        "drivers": len(by_driver),
    }


def time_panel(snap: Snapshot, hooks: Hooks) -> Panel:
    """The time split: what the application ran before and after the trials (calibration,
    validation), and the tuning itself split into proposing and evaluating."""
    est = estimate_split(snap)
    phases = hooks.phases(snap) if hooks.phases is not None else Phases()
    split: dict[str, float] = {
        **phases.before,
        "proposals": est["proposals"],
        "evaluations": est["evaluations"],
        **phases.after,
    }
    how = (
        "Tuning wall time (first trial to last finish) split into the driver's proposals, "
        "estimated from the stored times (the gap between a worker freeing and the next "
        "proposed trial being inserted), and the rest, spent evaluating."
    )
    if phases.measured:
        split, how = (
            dict(phases.measured),
            (
                f"Measured by the run itself ({phases.source}). Estimated from the stored times: "
                f"proposals {est['proposals']:.0f} s, evaluations {est['evaluations']:.0f} s."
            ),
        )
    elif phases.source:
        how += f" Phases before and after the trials: {phases.source}."
    total = sum(split.values())
    colors = ["#6a1b9a", "#1565c0", "#2e7d32", "#ef6c00", "#757575", "#00838f"]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": k,
            "x": [v],
            "y": ["wall clock"],
            "marker": {"color": colors[i % len(colors)]},
            "hovertemplate": f"{k}: %{{x:.0f}} s<extra></extra>",
        }
        for i, (k, v) in enumerate(split.items())
    ]
    fig = h.figure(
        "time-split",
        data,
        {"barmode": "stack", "xaxis": {"title": {"text": "seconds"}},
         "margin": {"l": 80, "r": 20, "t": 30, "b": 45},
         "legend": {"orientation": "h", "traceorder": "normal", "y": 1.02, "yanchor": "bottom"}},
    )  # fmt: skip
    rows = [
        [h.esc(k), f"{v:.0f}", f"{100 * v / total:.0f}%" if total else "-"]
        for k, v in split.items()
    ]
    rows.append(["<b>total</b>", f"<b>{total:.0f}</b>", ""])
    body = h.note(how) + h.div("time-split", 200) + h.table(["phase", "seconds", "share"], rows)
    body += h.note(
        f"Evaluations used {est['worker']:.0f} s of worker time (summed over workers, measured "
        f"by the workers), over {est['drivers']} driving process(es)."
    )
    numbers = {"split": {k: round(v, 3) for k, v in split.items()}, "estimate": est}
    return Panel("time", "Time split", body, (fig,), numbers)


# ---------------------------------------------------------------------- one trial
def trial_detail(
    snap: Snapshot, number: int, hooks: Hooks, front: Sequence[TrialRecord]
) -> dict[str, Any]:
    """``{"number", "html", "figures"}`` of trial ``number`` (see `studies.dashboard.views`).

    Raises:
        KeyError: If the study has no such trial.
    """
    from tuner.trial import split_run_metric

    by_number = {t.number: t for t in snap.trials}
    t = by_number[int(number)]
    on_front = any(f.number == t.number for f in front)
    rerun = next((x.number for x in snap.trials if x.retry_of == t.number), None)
    rows = [
        ("state", h.state(t.state) + (" &middot; on the Pareto front" if on_front else "")),
        *[(f"{k} ({d[:3]})", h.fmt((t.values or {}).get(k))) for k, d in snap.objectives.items()],
        ("worker", h.esc(t.worker or "-")),
        ("created", h.age(t.created) + " ago"),
        ("started", h.age(t.started) + (" ago" if t.started else "")),
        ("finished", h.age(t.finished) + (" ago" if t.finished else "")),
        ("seconds", h.fmt(t.duration)),
    ]
    if t.retry_of is not None:
        rows.append(("re-runs", h.trial_link(t.retry_of)))
    if rerun is not None:
        rows.append(("re-run as", h.trial_link(rerun)))
    left = h.table(["", ""], rows, cls="kv")
    if t.error:
        left += f'<h3>Error</h3><pre class="error">{h.esc(t.error)}</pre>'
    left += "<h3>Configuration</h3>" + h.table(["parameter", "value"], _config_rows(snap, t))
    figures, right = [], ""
    words = _words(hooks)
    got = words.read(snap.space, t, None) if t.config else None
    if got is not None:
        fig, height = h.bars("trial-priors", got[1], part=words.part, quantity=words.quantity)
        figures.append(fig)
        what = words.heading.lower()
        title = got[0] if got[0].startswith(what) else f"{what} ({got[0]})"
        right = f"<h3>{h.esc(title.capitalize())}</h3>" + h.div("trial-priors", height)
    per_run = {k: v for k, v in t.metrics.items() if split_run_metric(k) is not None}
    metrics = [(h.esc(k), h.fmt(v)) for k, v in sorted(t.metrics.items()) if k not in per_run]
    right += f"<h3>Metrics ({len(metrics)})</h3>" + '<div class="scroll short">'
    right += h.table(["metric", "value"], metrics, empty="none") + "</div>"
    if per_run:
        right += h.note(f"{len(per_run)} per-run metrics are stored too (`Study.to_dataframe`).")
    html = f'<h2>Trial {t.number}</h2><div class="cols"><div>{left}</div><div>{right}</div></div>'
    return {"number": t.number, "html": html, "figures": figures}


def _config_rows(snap: Snapshot, t: TrialRecord) -> list[tuple[str, str]]:
    from spaces import Fixed, Simplex

    rows = []
    for name, value in t.config.items():
        p = snap.space.params.get(name)
        if isinstance(p, Fixed):
            scalar = isinstance(value, int | float | str | bool)
            shown = f"{h.fmt(value)} (fixed)" if scalar else "(fixed: the same in every trial)"
        elif isinstance(p, Simplex) or isinstance(value, dict):
            ranked = sorted(value.items(), key=lambda kv: -kv[1]) if isinstance(value, dict) else []
            shown = " ".join(f"{k}={h.fmt(v)}" for k, v in ranked[:5])
            shown += f" (+{len(ranked) - 5} more)" if len(ranked) > 5 else ""
        else:
            shown = h.fmt(value)
        rows.append((h.esc(name), h.esc(shown)))
    return rows
