"""Matplotlib PNGs of a study: Pareto front, hypervolume over trials, the chosen trial's priors.

Every function renders headless (Agg) and returns the path it wrote; nothing needs a display or
a browser.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import ExportError
from studies.pareto import PickRule, choose_trial, feasible, hypervolume_curve, pareto_front
from studies.records import TrialRecord
from studies.simplex import simplex_names, simplex_weights

if TYPE_CHECKING:
    from studies.study import Study

__all__ = [
    "PriorsOf",
    "file_stem",
    "plot_hypervolume",
    "plot_pareto",
    "plot_priors",
    "plot_study",
    "simplex_priors",
]

PriorsOf = Callable[[Any, TrialRecord, "str | None"], "tuple[str, dict[str, float]] | None"]
"""``(space, trial, simplex) -> (title, priors)`` of the priors to draw, or None when the space
holds none; raises `ExportError` for a ``simplex`` it cannot read. `simplex_priors` reads a Simplex
parameter; an application whose priors are derived otherwise passes its own (the rewrite
application's: `rewrite_tuner.export.priors_to_plot`)."""

#: Rules drawn one bar each in `plot_priors`; the rest share one bar.
TOP_RULES = 15
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
    objectives (objective value over trial number for a single objective)."""
    plt = _pyplot()
    trials = study.trials
    ok = feasible(trials, study.constraints)
    front = {t.number for t in pareto_front(trials, study.objectives, study.constraints)}
    names = list(study.objectives)
    pairs = list(itertools.combinations(names, 2)) or [("trial", names[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4), squeeze=False)
    for ax, (a, b) in zip(axes[0], pairs):

        def coord(t: Any, k: str) -> float:
            return float(t.number) if k == "trial" else t.values[k]

        rest = [t for t in ok if t.number not in front]
        best = [t for t in ok if t.number in front]
        ax.scatter(
            [coord(t, a) for t in rest],
            [coord(t, b) for t in rest],
            s=18,
            c="0.6",
            label="feasible trials",
        )
        # points only: in a projection of 3+ objectives the Pareto set is no curve
        ax.scatter(
            [coord(t, a) for t in best],
            [coord(t, b) for t in best],
            s=36,
            c="C3",
            edgecolors="k",
            linewidths=0.5,
            label="Pareto set",
            zorder=3,
        )
        if len(best) <= _MAX_LABELS:
            for t in best:
                ax.annotate(
                    str(t.number),
                    (coord(t, a), coord(t, b)),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(4, 4),
                )
        ax.set_xlabel(a if a == "trial" else f"{a} ({study.objectives[a]})")
        ax.set_ylabel(f"{b} ({study.objectives[b]})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study.name}: Pareto front ({len(ok)} feasible trials)")
    return _save(fig, plt, path)


def plot_hypervolume(study: Study, path: str | os.PathLike[str]) -> Path:
    """Dominated hypervolume of the feasible trials after each finished trial (reference point:
    `studies.pareto.reference_point` over all feasible trials)."""
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
    return _save(fig, plt, path)


def simplex_priors(
    space: Any, trial: TrialRecord, simplex: str | None = None
) -> tuple[str, dict[str, float]] | None:
    """The default `PriorsOf`: the weights of the space's Simplex parameter ``simplex`` (or its
    only one), titled by its name; None for a space without a Simplex parameter."""
    if not simplex_names(space):
        return None
    return simplex_weights(space, trial, simplex)


def plot_priors(
    study: Study,
    path: str | os.PathLike[str],
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    priors_of: PriorsOf = simplex_priors,
) -> Path:
    """Ranked horizontal bars of the rule priors of the trial ``pick`` chooses (as the priors
    export does): the ``TOP_RULES`` largest, then one bar for all others, and a line at the
    uniform prior ``1 / n_rules`` for reference.

    Raises:
        ExportError: If the pick rule chooses nothing or ``priors_of`` finds no priors.
    """
    plt = _pyplot()
    trial, rule = choose_trial(study.trials, study.objectives, study.constraints, pick)
    got = priors_of(study.space, trial, simplex)
    if got is None:
        raise ExportError(f"Study {study.name!r} holds no priors to plot (no Simplex parameter).")
    what, priors = got
    ranked = sorted(priors, key=lambda r: (-priors[r], r))
    shown = ranked[:TOP_RULES]
    labels = list(shown)
    weights = [priors[r] for r in shown]
    if len(ranked) > len(shown):
        rest = ranked[len(shown) :]
        labels.append(f"{len(rest)} other rules (sum)")
        weights.append(sum(priors[r] for r in rest))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.3 * len(labels)))
    y = list(range(len(labels)))[::-1]  # largest on top
    colors = ["C2"] * len(shown) + ["0.7"] * (len(labels) - len(shown))
    ax.barh(y, weights, color=colors)
    ax.set_yticks(y, labels, fontsize=8)
    uniform = 1.0 / len(ranked)
    ax.axvline(uniform, color="k", ls="--", lw=1, label=f"uniform (1/{len(ranked)})")
    ax.set_xlabel("firing prior")
    ax.set_title(f"{study.name}: {what} of trial {trial.number}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.text(0.01, 0.005, rule, fontsize=7, color="0.4")
    return _save(fig, plt, path)


def plot_study(
    study: Study,
    out_dir: str | os.PathLike[str],
    pick: PickRule = None,
    simplex: str | None = None,
    *,
    priors_of: PriorsOf | None = None,
) -> list[Path]:
    """Write ``NAME-pareto.png``, ``NAME-hypervolume.png`` and (if ``priors_of`` finds priors in
    the chosen trial: by default a Simplex parameter) ``NAME-priors.png`` into ``out_dir``
    (created if missing); returns the paths written.

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
    with_priors = priors_of is not None or bool(simplex_names(study.space))
    reader = priors_of or simplex_priors
    if with_priors:  # check the pick and the simplex before drawing anything
        trial, _ = choose_trial(trials, study.objectives, study.constraints, pick)
        with_priors = reader(study.space, trial, simplex) is not None
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(study.name)
    paths = [
        plot_pareto(study, out / f"{stem}-pareto.png"),
        plot_hypervolume(study, out / f"{stem}-hypervolume.png"),
    ]
    if with_priors:
        paths.append(
            plot_priors(study, out / f"{stem}-priors.png", pick, simplex, priors_of=reader)
        )
    return paths


def _save(fig: Any, plt: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
