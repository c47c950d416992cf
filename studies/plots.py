"""Matplotlib PNGs of a study: Pareto front, hypervolume over trials, the chosen trial's weights
(a Simplex parameter's, or what the application's `studies.weights.WeightsOf` reads, in its
words).

Every function renders headless (Agg) and returns the path it wrote; nothing needs a display or
a browser.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import ExportError
from studies.pareto import PickRule, choose_trial, feasible, hypervolume_curve, pareto_front
from studies.records import TrialRecord
from studies.simplex import simplex_names
from studies.weights import SIMPLEX, WeightsOf

if TYPE_CHECKING:
    from studies.study import Study

__all__ = [
    "TOP_PARTS",
    "file_stem",
    "hypervolume_figure",
    "plot_hypervolume",
    "plot_pareto",
    "plot_study",
    "plot_weights",
    "pareto_figure",
    "weights_figure",
]

#: Parts drawn one bar each in `plot_weights`; the rest share one bar.
TOP_PARTS = 15
#: Pareto points labelled with their trial number (more would overlap).
_MAX_LABELS = 12


def file_stem(name: str) -> str:
    """A study name made safe for a file name: every character outside ``[A-Za-z0-9._-]``
    becomes ``_``, and leading dots become ``_`` (no hidden files, no ``.``/``..`` parts).

    ``"team/tune"`` -> ``"team_tune"``, ``"../escape"`` -> ``"___escape"``. Every file name built
    from a study name goes through here.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    slug = re.sub(r"^\.+", lambda m: "_" * len(m.group()), slug)
    return slug or "_"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_pareto(study: Study, path: str | os.PathLike[str]) -> Path:
    """Scatter of the feasible trials with the Pareto set highlighted, one panel per pair of
    objectives (objective value over trial number for a single objective): `pareto_figure`."""
    plt = _pyplot()
    return _save(pareto_figure(study), plt, path, tight=False)  # laid out before labelling


def pareto_figure(study: Study) -> Any:
    """The figure `plot_pareto` saves. Each axis fits the Pareto set and the bulk of the trials
    (Tukey's fences); a trial beyond them is drawn at the edge it lies past, as a hollow mark,
    so one outlier does not squeeze the front into a corner. Pareto points are labelled with
    their trial numbers (points that coincide share one label) where a label fits without
    overlapping another (`structure.labels.place_labels`)."""
    plt = _pyplot()
    trials = study.trials
    ok = feasible(trials, study.constraints)
    front = {t.number for t in pareto_front(trials, study.objectives, study.constraints)}
    names = list(study.objectives)
    pairs = list(itertools.combinations(names, 2)) or [("trial", names[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.5 * len(pairs), 4.4), squeeze=False)
    for ax, (a, b) in zip(axes[0], pairs):
        _pareto_panel(study, ax, a, b, ok, front)
    fig.suptitle(f"{study.name}: Pareto front ({len(ok)} feasible trials)")
    fig.tight_layout()
    for ax, (a, b) in zip(axes[0], pairs):
        _label_front(study, ax, a, b, [t for t in ok if t.number in front])
    return fig


def _coord(t: TrialRecord, k: str) -> float:
    return float(t.number) if k == "trial" else float((t.values or {})[k])


def axis_view(front: list[float], every: list[float]) -> tuple[float, float]:
    """Axis limits holding the front and the trials inside Tukey's fences (1.5 IQR beyond the
    quartiles), padded by 6%."""
    import numpy as np

    q1, q3 = np.percentile(every, [25, 75])
    iqr = q3 - q1
    inner = [v for v in every if q1 - 1.5 * iqr <= v <= q3 + 1.5 * iqr]
    lo, hi = min(front + inner), max(front + inner)
    pad = 0.06 * (hi - lo) if hi > lo else max(abs(hi) * 0.05, 1e-9)
    return lo - pad, hi + pad


def _pareto_panel(
    study: Study, ax: Any, a: str, b: str, ok: list[TrialRecord], front: set[int]
) -> None:
    """One panel of `pareto_figure`: trials, the Pareto set, outliers at the edges."""
    best = [t for t in ok if t.number in front]
    limits = {}
    for k in (a, b):
        every = [_coord(t, k) for t in ok]
        limits[k] = (
            (min(every) - 0.5, max(every) + 0.5)
            if k == "trial"
            else axis_view([_coord(t, k) for t in best], every)
        )
    (x0, x1), (y0, y1) = limits[a], limits[b]
    inside: list[tuple[TrialRecord, float, float]] = []
    outside: list[tuple[TrialRecord, float, float]] = []
    for t in ok:
        x, y = _coord(t, a), _coord(t, b)
        (inside if x0 <= x <= x1 and y0 <= y <= y1 else outside).append((t, x, y))
    rest = [(x, y) for t, x, y in inside if t.number not in front]
    top = [(x, y) for t, x, y in inside if t.number in front]
    ax.scatter(*zip(*rest) if rest else ([], []), s=18, c="0.6", label="feasible trials")
    # points only: in a projection of 3+ objectives the Pareto set is no curve
    ax.scatter(
        *zip(*top) if top else ([], []), s=36, c="C3", edgecolors="k", linewidths=0.5,
        label="Pareto set", zorder=3,
    )  # fmt: skip
    if outside:
        clipped = [(min(max(x, x0), x1), min(max(y, y0), y1)) for _, x, y in outside]
        ax.scatter(
            *zip(*clipped), s=30, facecolors="none", edgecolors="C0", linewidths=1.0,
            marker="D", clip_on=False, zorder=4,
            label=f"{len(outside)} trial{'s' * (len(outside) > 1)} beyond the axes (at the edge)",
        )  # fmt: skip
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_xlabel(a if a == "trial" else f"{a} ({study.objectives[a]})")
    ax.set_ylabel(f"{b} ({study.objectives[b]})")
    ax.grid(alpha=0.3)
    # below the axes: inside, it covered points and labels
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)


def _label_front(study: Study, ax: Any, a: str, b: str, best: list[TrialRecord]) -> None:
    """Trial numbers at the Pareto points of a panel; coinciding points share one label (up to
    `_MAX_LABELS` labels, none overlapping)."""
    from structure.labels import place_labels, text_boxes

    fig = ax.figure
    fig.canvas.draw()
    to_px = ax.transData.transform
    groups: list[tuple[float, float, list[int]]] = []
    for t in sorted(best, key=lambda t: (_coord(t, a), _coord(t, b))):
        x, y = _coord(t, a), _coord(t, b)
        px = to_px((x, y))
        for gx, gy, numbers in groups:
            if abs(to_px((gx, gy)) - px).max() < 4.0:  # the same spot on screen
                numbers.append(t.number)
                break
        else:
            groups.append((x, y, [t.number]))
    if len(groups) > _MAX_LABELS:
        return
    anchors = []
    for x, y, numbers in groups:
        shown = ", ".join(map(str, sorted(numbers)[:4]))
        anchors.append((x, y, shown + (f" +{len(numbers) - 4}" if len(numbers) > 4 else "")))
    place_labels(ax, anchors, occupied=text_boxes(fig), fontsize=7)


def plot_hypervolume(study: Study, path: str | os.PathLike[str]) -> Path:
    """Dominated hypervolume of the feasible trials after each finished trial (reference point:
    `studies.pareto.reference_point` over all feasible trials): `hypervolume_figure`."""
    return _save(hypervolume_figure(study), _pyplot(), path)


def hypervolume_figure(study: Study) -> Any:
    """The figure `plot_hypervolume` saves."""
    plt = _pyplot()
    trials = study.trials
    numbers, hv = hypervolume_curve(trials, study.objectives, study.constraints)
    complete = {t.number for t in trials if t.state == "COMPLETE"}
    curve = [h for n, h in zip(numbers, hv) if n in complete]  # failed trials add nothing
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(range(1, len(curve) + 1), curve, where="post", c="C0")
    ax.set_xlabel("completed trials")
    ax.set_ylabel("dominated hypervolume")
    ax.set_title(f"{study.name}: hypervolume over completed trials")
    ax.grid(alpha=0.3)
    return fig


def plot_weights(
    study: Study,
    path: str | os.PathLike[str],
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    weights_of: WeightsOf = SIMPLEX,
) -> Path:
    """Ranked horizontal bars of the weights of the trial ``pick`` chooses (as an export does): the
    ``TOP_PARTS`` largest, then one bar for all others, and a line at the uniform weight
    ``1 / n_parts`` for reference: `weights_figure`.

    Raises:
        ExportError: If the pick rule chooses nothing or ``weights_of`` finds no weights.
    """
    fig = weights_figure(study, pick, simplex, weights_of=weights_of)
    return _save(fig, _pyplot(), path)


def weights_figure(
    study: Study,
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    weights_of: WeightsOf = SIMPLEX,
) -> Any:
    """The figure `plot_weights` saves.

    Raises:
        ExportError: As `plot_weights`.
    """
    plt = _pyplot()
    trial, rule = choose_trial(study.trials, study.objectives, study.constraints, pick)
    got = weights_of.read(study.space, trial, simplex)
    if got is None:
        raise ExportError(
            f"Study {study.name!r} holds no {weights_of.quantity}s to plot (no Simplex parameter)."
        )
    what, by_part = got
    ranked = sorted(by_part, key=lambda r: (-by_part[r], r))
    shown = ranked[:TOP_PARTS]
    labels = list(shown)
    weights = [by_part[r] for r in shown]
    if len(ranked) > len(shown):
        rest = ranked[len(shown) :]
        labels.append(f"{len(rest)} other {weights_of.part}s (sum)")
        weights.append(sum(by_part[r] for r in rest))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.3 * len(labels)))
    y = list(range(len(labels)))[::-1]  # largest on top
    colors = ["C2"] * len(shown) + ["0.7"] * (len(labels) - len(shown))
    ax.barh(y, weights, color=colors)
    ax.set_yticks(y, labels, fontsize=8)
    uniform = 1.0 / len(ranked)
    ax.axvline(uniform, color="k", ls="--", lw=1, label=f"uniform (1/{len(ranked)})")
    ax.set_xlabel(weights_of.quantity)
    ax.set_title(f"{study.name}: {what} of trial {trial.number}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.text(0.01, 0.005, rule, fontsize=7, color="0.4")
    return fig


def plot_study(
    study: Study,
    out_dir: str | os.PathLike[str],
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    weights_of: WeightsOf | None = None,
) -> list[Path]:
    """Write ``NAME-pareto.png``, ``NAME-hypervolume.png`` and (if ``weights_of`` finds weights in
    the chosen trial: by default a Simplex parameter) ``NAME-<file_suffix>.png`` (`WeightsOf`;
    by default ``NAME-weights.png``) into ``out_dir`` (created if missing); returns the paths
    written.

    ``NAME`` is `file_stem` of the study name.

    Raises:
        ExportError: Before anything is written, if ``out_dir`` is an existing file, the study has
            no feasible COMPLETE trial, or the pick rule or ``simplex`` chooses nothing.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ExportError(
            f"out_dir {str(out)!r} is an existing file, not a folder; name a folder (it is "
            "created if missing). Nothing was written."
        )
    trials = study.trials
    if not feasible(trials, study.constraints):
        counts = {s: sum(t.state == s for t in trials) for s in ("COMPLETE", "FAILED")}
        raise ExportError(
            f"Study {study.name!r} has no feasible COMPLETE trial to plot ({len(trials)} trials: "
            f"{counts['COMPLETE']} COMPLETE, {counts['FAILED']} FAILED; constraints "
            f"{list(study.constraints)}); run trials first. Nothing was written."
        )
    with_weights = weights_of is not None or bool(simplex_names(study.space))
    view = weights_of or SIMPLEX
    if with_weights:  # check the pick and the simplex before drawing anything
        trial, _ = choose_trial(trials, study.objectives, study.constraints, pick)
        with_weights = view.read(study.space, trial, simplex) is not None
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(study.name)
    paths = [
        plot_pareto(study, out / f"{stem}-pareto.png"),
        plot_hypervolume(study, out / f"{stem}-hypervolume.png"),
    ]
    if with_weights:
        path = out / f"{stem}-{view.file_suffix}.png"
        paths.append(plot_weights(study, path, pick, simplex, weights_of=view))
    return paths


def _save(fig: Any, plt: Any, path: str | os.PathLike[str], tight: bool = True) -> Path:
    path = Path(path)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
