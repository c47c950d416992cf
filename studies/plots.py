"""Matplotlib PNGs of a study: Pareto front, hypervolume over trials, the chosen trial's priors.

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

if TYPE_CHECKING:
    from studies.study import Study

__all__ = ["file_stem", "plot_hypervolume", "plot_pareto", "plot_priors", "plot_study"]


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
        best = sorted((t for t in ok if t.number in front), key=lambda t: coord(t, a))
        ax.scatter(
            [coord(t, a) for t in rest],
            [coord(t, b) for t in rest],
            s=18,
            c="0.6",
            label="feasible trials",
        )
        ax.plot(
            [coord(t, a) for t in best],
            [coord(t, b) for t in best],
            "o-",
            c="C3",
            label="Pareto set",
        )
        for t in best:
            ax.annotate(
                str(t.number),
                (coord(t, a), coord(t, b)),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
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
    numbers, hv = hypervolume_curve(study.trials, study.objectives, study.constraints)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(range(1, len(hv) + 1), hv, where="post", c="C0")
    ax.set_xlabel("finished trials")
    ax.set_ylabel("dominated hypervolume")
    ax.set_title(f"{study.name}: hypervolume over trials")
    ax.grid(alpha=0.3)
    return _save(fig, plt, path)


def plot_priors(
    study: Study, path: str | os.PathLike[str], pick: PickRule = None, simplex: str | None = None
) -> Path:
    """Bar chart of the rule priors of the trial ``pick`` chooses (as `Study.export_priors`)."""
    from studies.export import priors_from_trial

    plt = _pyplot()
    trial, rule = choose_trial(study.trials, study.objectives, study.constraints, pick)
    name, priors, _ = priors_from_trial(study.space, trial, simplex)
    rules = sorted(priors, key=lambda r: -priors[r])
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(rules) + 2), 4))
    ax.bar(rules, [priors[r] for r in rules], color="C2")
    ax.set_ylabel("firing prior")
    ax.set_title(f"{study.name}: {name} of trial {trial.number}", fontsize=10)
    ax.tick_params(axis="x", rotation=45)
    fig.text(0.01, 0.01, rule, fontsize=7, color="0.4")
    return _save(fig, plt, path)


def plot_study(
    study: Study, out_dir: str | os.PathLike[str], pick: PickRule = None, simplex: str | None = None
) -> list[Path]:
    """Write ``NAME-pareto.png``, ``NAME-hypervolume.png`` and (if the space has a Simplex)
    ``NAME-priors.png`` into ``out_dir`` (created if missing); returns the paths written.

    ``NAME`` is `file_stem` of the study name.

    Raises:
        ExportError: Before anything is written, if ``out_dir`` is an existing file, the study has
            no feasible COMPLETE trial, or the pick rule or ``simplex`` chooses nothing.
    """
    from studies.export import priors_from_trial, simplex_names

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
    with_priors = bool(simplex_names(study.space))
    if with_priors:  # check the pick and the simplex before drawing anything
        trial, _ = choose_trial(trials, study.objectives, study.constraints, pick)
        priors_from_trial(study.space, trial, simplex)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(study.name)
    paths = [
        plot_pareto(study, out / f"{stem}-pareto.png"),
        plot_hypervolume(study, out / f"{stem}-hypervolume.png"),
    ]
    if with_priors:
        paths.append(plot_priors(study, out / f"{stem}-priors.png", pick, simplex))
    return paths


def _save(fig: Any, plt: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
