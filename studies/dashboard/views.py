"""The dashboard's views of one study, computed from a `Snapshot`: what the live page and the
report both draw.

`build` returns the page's payload: the study's headline numbers and one `Panel` per view, in
tab order: overview, history and hypervolume, Pareto front, parallel coordinates, rule priors,
structure and surrogate, running trials, failures, time split, every trial, then the panels the
application's `Hooks` add. The results are cached on the snapshot, so a page polling an unchanged
study costs one aggregate query. `trial_detail` is the view of one trial (a click away from every
trial number and Pareto point).

The views of the model and of the run are in `studies.dashboard.panels`; the numbers here are the
ones `tuner status` and `tuner plot` show (`studies.views`, `studies.pareto`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from studies.dashboard import markup as h
from studies.dashboard import panels
from studies.dashboard.hooks import Hooks, Panel
from studies.dashboard.snapshot import Snapshot
from studies.pareto import feasible, hypervolume_curve, pareto_front
from studies.records import TrialRecord
from studies.views import progress_counts
from studies.weights import SIMPLEX, WeightsOf

__all__ = ["build", "headline", "trial_detail"]

logger = logging.getLogger(__name__)

#: Trials the Trials table lists on the live page (newest first); the report lists every one.
TABLE_ROWS = 300


def build(
    snap: Snapshot,
    hooks: Hooks,
    *,
    report: bool = False,
    structure: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The page's payload for ``snap``: ``study``, ``study_id``, ``url``, ``version``, ``read_at``,
    ``numbers`` (`headline`) and ``panels`` (each `Panel.to_dict`). Cached on the snapshot.

    ``report``: list every trial; ``structure``: the learned structure to show
    (`studies.dashboard.structure_fits.fit_snapshot`; the live page loads it on its own)."""
    key = f"views:{report}"
    if key in snap.cache:
        return snap.cache[key]  # type: ignore[no-any-return]
    makers: list[Callable[[], Panel | None]] = [
        lambda: overview_panel(snap),
        lambda: history_panel(snap),
        lambda: pareto_panel(snap),
        lambda: parallel_panel(snap, hooks.weights_of or SIMPLEX),
        lambda: panels.weights_panel(snap, hooks),
        lambda: panels.structure_panel(snap, structure),
        lambda: panels.running_panel(snap),
        lambda: panels.failures_panel(snap),
        lambda: panels.time_panel(snap, hooks),
        lambda: trials_panel(snap, report=report),
    ]
    makers += [(lambda make=make: make(snap)) for make in hooks.panels]  # type: ignore[misc]
    out: list[dict[str, Any]] = []
    for make in makers:
        try:
            panel = make()
        except Exception as err:  # noqa: BLE001 - one broken view must not hide the others
            logger.warning("A dashboard view failed: %s", err, exc_info=True)
            text = h.note(f"This view failed: {type(err).__name__}: {err}", "warn")
            panel = Panel(f"error-{len(out)}", "Error", text)
        if panel is not None:
            out.append(panel.to_dict())
    payload = {
        "study": snap.name,
        "study_id": snap.record.id,
        "url": snap.url,
        "version": snap.version,
        "read_at": snap.read_at,
        "numbers": headline(snap),
        "panels": out,
    }
    snap.cache[key] = payload
    return payload


def front(snap: Snapshot) -> list[TrialRecord]:
    """The Pareto set (cached on the snapshot)."""
    if "front" not in snap.cache:
        snap.cache["front"] = pareto_front(list(snap.trials), snap.objectives, snap.constraints)
    return snap.cache["front"]  # type: ignore[no-any-return]


def feasible_trials(snap: Snapshot) -> list[TrialRecord]:
    """COMPLETE trials meeting the constraints (cached on the snapshot)."""
    if "feasible" not in snap.cache:
        snap.cache["feasible"] = feasible(list(snap.trials), snap.constraints)
    return snap.cache["feasible"]  # type: ignore[no-any-return]


def headline(snap: Snapshot) -> dict[str, Any]:
    """The study's numbers as `tuner status` counts them: ``trials`` (stored rows),
    ``finished`` / ``used`` / ``running`` / ``waiting`` (`studies.views.progress_counts`),
    ``complete``, ``failed``, ``budget``, ``best`` (objective -> ``{"value", "trial"}`` over
    feasible trials) and ``pareto`` (the Pareto set's trial numbers)."""
    if "headline" in snap.cache:
        return snap.cache["headline"]  # type: ignore[no-any-return]
    trials = list(snap.trials)
    counts = progress_counts(trials)
    ok = feasible_trials(snap)
    best: dict[str, dict[str, Any]] = {}
    for k, d in snap.objectives.items():
        if ok:
            pick = ok[0]
            for t in ok[1:]:  # ties: the lowest number, as `studies.views.best_values`
                v, b = (t.values or {})[k], (pick.values or {})[k]
                if (v > b) if d == "maximize" else (v < b):
                    pick = t
            best[k] = {"value": (pick.values or {})[k], "trial": pick.number}
    out = {
        "trials": len(trials),
        **counts,
        "complete": sum(t.state == "COMPLETE" for t in trials),
        "failed": sum(t.state == "FAILED" for t in trials),
        "budget": snap.record.budget,
        "best": best,
        "pareto": [t.number for t in front(snap)],
    }
    snap.cache["headline"] = out
    return out


def overview_panel(snap: Snapshot) -> Panel:
    """Counts, best values and the Pareto set at a glance."""
    n = headline(snap)
    budget = n["budget"]
    of = f" / {budget}" if budget is not None else ""
    items = [
        ("trials finished", f"{n['finished']}{of}", "finished"),
        ("trials stored", str(n["trials"]), "trials"),
        ("COMPLETE", str(n["complete"]), "complete"),
        ("FAILED", str(n["failed"]), "failed"),
        ("RUNNING", str(n["running"]), "running"),
        ("WAITING", str(n["waiting"]), "waiting"),
        ("Pareto set", str(len(n["pareto"])), "pareto"),
    ]
    for k, d in snap.objectives.items():
        b = n["best"].get(k)
        value = f"{h.fmt(b['value'])} <small>{h.trial_link(b['trial'])}</small>" if b else "-"
        items.append((f"best {k} ({d[:3]})", value, f"best.{k}"))
    rows = [
        ("study", h.esc(snap.name)),
        ("storage", h.esc(snap.url)),
        ("objectives", h.esc(", ".join(f"{k} ({d})" for k, d in snap.objectives.items()))),
        ("constraints", h.esc(", ".join(snap.constraints) or "none")),
        ("seed", h.esc(snap.record.seed)),
        ("created", h.age(snap.record.created) + " ago"),
        ("last change", h.age(_last_change(snap)) + " ago"),
    ]
    info = h.table(["", ""], rows, cls="kv")
    front_rows = [
        [h.trial_link(t.number), *[h.fmt((t.values or {}).get(k)) for k in snap.objectives]]
        for t in front(snap)
    ]
    pareto = h.table(["trial", *snap.objectives], front_rows, empty="no feasible trial yet")
    body = (
        h.cards(items)
        + '<div class="cols"><div>'
        + info
        + "</div><div><h3>Pareto set</h3>"
        + pareto
        + "</div></div>"
    )
    return Panel("overview", "Overview", body, numbers=n)


def _last_change(snap: Snapshot) -> float:
    times = [snap.record.created]
    for t in snap.trials:
        times += [x for x in (t.created, t.started, t.finished, t.heartbeat) if x is not None]
    return max(times)


def history_panel(snap: Snapshot) -> Panel:
    """Each objective over the trial numbers, and the dominated hypervolume over the completed
    trials (as ``tuner plot`` draws it)."""
    ok = feasible_trials(snap)
    on_front = {t.number for t in front(snap)}
    complete = [t for t in snap.trials if t.state == "COMPLETE" and t.values]
    ok_numbers = {t.number for t in ok}
    figures, divs = [], []
    for i, (k, d) in enumerate(snap.objectives.items()):
        groups = [
            ("feasible", [t for t in complete if t.number in ok_numbers and t.number not in on_front], "#90a4ae", "circle"),
            ("Pareto set", [t for t in complete if t.number in on_front], "#d32f2f", "circle"),
            ("infeasible", [t for t in complete if t.number not in ok_numbers], "#bdbdbd", "x"),
        ]  # fmt: skip
        data = [_points(name, ts, "number", k, color, symbol) for name, ts, color, symbol in groups]
        best = _running_best([t for t in complete if t.number in ok_numbers], k, d)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"best so far ({d[:3]})",
                "x": [p[0] for p in best],
                "y": [p[1] for p in best],
                "line": {"shape": "hv", "color": "#1565c0"},
                "hoverinfo": "skip",
            }
        )
        layout = {
            "title": {"text": f"{k} ({d}) over trials"},
            "xaxis": {"title": {"text": "trial number"}},
            "yaxis": {"title": {"text": k}},
        }
        figures.append(h.figure(f"hist-{i}", data, layout))
        divs.append(h.div(f"hist-{i}", 330))
    hv_fig, last = _hypervolume_figure(snap)
    text = h.note(
        "Reference point: each objective's worst feasible value minus 10% of its range "
        "(fixed for the whole curve, as `tuner plot` draws it); it moves when a new trial "
        "widens the range, so the curve is redrawn whole."
    )
    body = h.div("hist-hv", 330) + text + "".join(divs)
    return Panel("history", "History", body, (hv_fig, *figures), {"hypervolume": last})


def _hypervolume_figure(snap: Snapshot) -> tuple[dict[str, Any], float]:
    """The hypervolume over completed trials, and its last value."""
    numbers, hv = _hypervolume(snap)
    fig = h.figure(
        "hist-hv",
        [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "hypervolume",
                "x": list(range(1, len(hv) + 1)),
                "y": hv,
                "customdata": numbers,
                "line": {"shape": "hv", "color": "#1565c0"},
                "marker": {"size": 4},
                "hovertemplate": "after trial #%{customdata}: %{y:.5g}<extra></extra>",
            }
        ],
        {
            "title": {"text": "dominated hypervolume over completed trials"},
            "xaxis": {"title": {"text": "completed trials"}},
            "yaxis": {"title": {"text": "hypervolume"}},
        },
    )
    return fig, (hv[-1] if hv else 0.0)


def _hypervolume(snap: Snapshot) -> tuple[list[int], list[float]]:
    """Hypervolume after each completed trial (cached)."""
    if "hv" not in snap.cache:
        trials = list(snap.trials)
        numbers, hv = hypervolume_curve(trials, snap.objectives, snap.constraints)
        complete = {t.number for t in trials if t.state == "COMPLETE"}
        pairs = [(n, v) for n, v in zip(numbers, hv) if n in complete]
        snap.cache["hv"] = ([n for n, _ in pairs], [round(v, 9) for _, v in pairs])
    return snap.cache["hv"]  # type: ignore[no-any-return]


def _running_best(trials: Sequence[TrialRecord], k: str, direction: str) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    best: float | None = None
    for t in sorted(trials, key=lambda t: t.number):
        v = t.values[k]  # type: ignore[index]
        if best is None or (v > best if direction == "maximize" else v < best):
            best = v
        out.append((t.number, best))
    return out


def _points(
    name: str, trials: Sequence[TrialRecord], x: str, y: str, color: str, symbol: str
) -> dict[str, Any]:
    """A scatter trace of ``trials`` (``x``/``y``: an objective, or ``"number"``); each point
    carries its trial number, so a click opens the trial."""

    def coord(t: TrialRecord, k: str) -> float:
        return float(t.number) if k == "number" else float(t.values[k])  # type: ignore[index]

    return {
        "type": "scattergl" if len(trials) > 5000 else "scatter",  # WebGL: slow without a GPU
        "mode": "markers",
        "name": name,
        "x": [coord(t, x) for t in trials],
        "y": [coord(t, y) for t in trials],
        "customdata": [t.number for t in trials],
        "marker": {
            "color": color,
            "symbol": symbol,
            "size": 9 if name == "Pareto set" else 7,
            "line": {"width": 0.5, "color": "#333"},
        },
        "hovertemplate": "trial #%{customdata}<br>"
        + f"{x}: %{{x:.5g}}<br>{y}: %{{y:.5g}}<extra>{name}</extra>",
    }


def pareto_panel(snap: Snapshot) -> Panel:
    """The feasible trials in objective space, one figure per pair of objectives, the Pareto set
    highlighted; a click on a point opens its trial. The axes open on the front and the trials
    inside Tukey's fences (`studies.plots.axis_view`), and the note counts the trials outside."""
    import itertools

    from studies.plots import axis_view

    ok = feasible_trials(snap)
    on_front = {t.number for t in front(snap)}
    names = list(snap.objectives)
    pairs = list(itertools.combinations(names, 2))[:3] or [("number", names[0])]
    ok_numbers = {t.number for t in ok}
    infeasible = [
        t for t in snap.trials if t.state == "COMPLETE" and t.values and t.number not in ok_numbers
    ]
    figures, divs = [], []
    hidden: set[int] = set()
    for i, (a, b) in enumerate(pairs):
        data = [
            _points("feasible", [t for t in ok if t.number not in on_front], a, b, "#90a4ae", "circle"),
            _points("Pareto set", [t for t in ok if t.number in on_front], a, b, "#d32f2f", "circle"),
        ]  # fmt: skip
        if infeasible:
            data.append(_points("infeasible", infeasible, a, b, "#e0e0e0", "x"))

        def label(k: str) -> str:
            return "trial number" if k == "number" else f"{k} ({snap.objectives[k]})"

        axes: dict[str, dict[str, Any]] = {k: {"title": {"text": label(k)}} for k in (a, b)}
        for k in (a, b):  # the front and the bulk of the trials, as `tuner plot` draws them
            if k != "number" and ok:
                every = [float(t.values[k]) for t in ok]  # type: ignore[index]
                best = [v for t, v in zip(ok, every) if t.number in on_front]
                lo, hi = axis_view(best, every)
                axes[k]["range"] = [lo, hi]
                hidden |= {t.number for t, v in zip(ok, every) if not lo <= v <= hi}
        layout = {
            "title": {"text": f"Pareto front: {label(b)} vs {label(a)}"},
            "xaxis": axes[a],
            "yaxis": axes[b],
        }
        figures.append(h.figure(f"pareto-{i}", data, layout))
        divs.append(h.div(f"pareto-{i}", 420))
    more = len(list(itertools.combinations(names, 2))) - len(pairs)
    text = h.note(
        f"{len(on_front)} trials on the Pareto front of {len(ok)} feasible ones. Click a point to "
        "open its trial."
        + (f" ({more} more pairs of objectives not drawn.)" if more > 0 else "")
        + (
            f" The axes fit the front and the bulk of the trials: {len(hidden)} outlying "
            f"trial{'s' if len(hidden) != 1 else ''} outside the view (double-click the plot to "
            "show every trial)."
            if hidden
            else ""
        )
    )
    return Panel("pareto", "Pareto front", text + "".join(divs), tuple(figures))


def parallel_panel(snap: Snapshot, words: WeightsOf = SIMPLEX) -> Panel:
    """Parallel coordinates over the knobs (every tuned parameter that is not a Simplex: its
    weights, named by ``words``, have a view of their own) and the objectives, one line per
    COMPLETE trial, colored by the first objective."""
    from spaces import Bool, Choice, Fixed, Float, Int, Simplex

    complete = [t for t in snap.trials if t.state == "COMPLETE" and t.values]
    dims: list[dict[str, Any]] = []
    for name, p in snap.space.params.items():
        if isinstance(p, Fixed | Simplex):
            continue
        values = [t.config.get(name) for t in complete]
        if isinstance(p, Float | Int):
            dims.append(_numeric_dim(name, values, float(p.low), float(p.high), bool(p.log)))
        elif isinstance(p, Choice | Bool):
            choices = list(p.values) if isinstance(p, Choice) else [False, True]
            code = {repr(c): i for i, c in enumerate(choices)}
            dims.append(
                {
                    "label": name,
                    "values": [code.get(repr(v), -1) for v in values],
                    "range": [0, max(len(choices) - 1, 1)],
                    "tickvals": list(range(len(choices))),
                    "ticktext": [str(c) for c in choices],
                }
            )
    knobs = len(dims)
    first = next(iter(snap.objectives))
    for k in snap.objectives:
        dims.append({"label": k, "values": [float(t.values[k]) for t in complete]})  # type: ignore[index]
    if not knobs:
        body = h.note(
            f"This study tunes no knob outside its {words.heading.lower()}: nothing to draw.",
            "empty",
        )
        return Panel("parallel", "Parallel coordinates", body)
    data: list[dict[str, Any]] = [
        {
            "type": "parcoords",
            "dimensions": dims,
            "line": {
                "color": [float(t.values[first]) for t in complete],  # type: ignore[index]
                "colorscale": "Viridis",
                "reversescale": snap.objectives[first] == "minimize",
                "showscale": True,
                "colorbar": {"title": {"text": first}},
            },
        }
    ]
    data[0]["labelangle"] = -20 if len(dims) > 8 else 0  # long names side by side
    fig = h.figure("parallel", data, {"margin": {"l": 70, "r": 70, "t": 110, "b": 30}})
    text = h.note(
        f"{len(complete)} completed trials: {knobs} knobs, then the objectives; log-scale knobs "
        f"on a log axis; drag along an axis to filter. {words.heading} are in their own view."
    )
    return Panel("parallel", "Parallel coordinates", text + h.div("parallel", 460), (fig,))


def _numeric_dim(name: str, values: list[Any], low: float, high: float, log: bool) -> dict:
    import math

    if not log or low <= 0:
        return {"label": name, "values": [float(v) for v in values], "range": [low, high]}
    lo, hi = math.log10(low), math.log10(high)
    decades = range(math.floor(lo), math.ceil(hi) + 1)
    ticks = [m * 10.0**e for e in decades for m in (1, 2, 5) if low <= m * 10.0**e <= high]
    if len(ticks) > 7:  # several decades: their powers of ten only
        ticks = [t for t in ticks if f"{t:g}".lstrip("0.").startswith("1")]
    return {
        "label": f"{name} (log)",
        "values": [math.log10(float(v)) for v in values],
        "range": [lo, hi],
        "tickvals": [math.log10(t) for t in ticks],
        "ticktext": [f"{t:g}" for t in ticks],
    }


def trials_panel(snap: Snapshot, *, report: bool = False) -> Panel:
    """Every trial (the newest `TABLE_ROWS` on the live page): state, objectives, duration,
    worker, error."""
    trials = sorted(snap.trials, key=lambda t: -t.number)
    shown = trials if report else trials[:TABLE_ROWS]
    rows = [
        [
            h.trial_link(t.number),
            h.state(t.state),
            *[h.fmt((t.values or {}).get(k)) for k in snap.objectives],
            h.fmt(t.duration),
            h.esc(t.worker or ""),
            h.esc((t.error or "")[:160]),
        ]
        for t in shown
    ]
    headers = ["trial", "state", *snap.objectives, "seconds", "worker", "error"]
    more = len(trials) - len(shown)
    text = (
        h.note(
            f"The newest {len(shown)} of {len(trials)} trials; the full table with filters is "
            "in optuna-dashboard (link at the top)."
        )  # fmt: skip
        if more
        else ""
    )
    body = text + '<div class="scroll">' + h.table(headers, rows, cls="trials") + "</div>"
    return Panel("trials", "Trials", body, numbers={"rows": len(shown)})


def trial_detail(snap: Snapshot, number: int, hooks: Hooks) -> dict[str, Any]:
    """The view of trial ``number``: ``html`` and ``figures`` (its rule priors as bars).

    Raises:
        KeyError: If the study has no such trial.
    """
    return panels.trial_detail(snap, number, hooks, front(snap))
