"""`OptunaView`: a study storage seen through Optuna's `BaseStorage`, read-only, so that
optuna-dashboard (and ``optuna.visualization``) can show its studies unchanged.

The mapping:

- A study is an Optuna study of the same name and id, one direction per objective (in order),
  its objective names as Optuna's metric names, its storage and constraints as user attributes.
  Through optuna-dashboard's two extension points, both study system attributes it reads (and
  which this view computes, never stores): a study note (Markdown) linking to this project's
  views of what optuna-dashboard cannot show (structure, running trials, failures, time split,
  held-out validation), and Plotly figures it draws on the study's page (the hypervolume over
  trials, the exported rule priors, the time split). A FAILED trial's note holds its error.
- A trial is an Optuna trial of the same number: COMPLETE, FAIL, RUNNING or WAITING; its
  parameters are the configuration with one column per part of a `Simplex` (``priors.fuse``,
  ``priors.merge``...), each `Float` / `Int` a `FloatDistribution` / `IntDistribution` and each
  `Choice` / `Bool` a `CategoricalDistribution`; `Fixed` parameters, the same in every trial, are
  left out. Its metrics (not the per-run ones), worker, seconds, heartbeat, the trial it re-runs
  and its error are user attributes (columns of the dashboard's trial table), and outcome
  constraints are Optuna's ``constraints`` (a value <= 0 is met), so the dashboard marks
  infeasible trials. Trial ids are ``study_id * 10**8 + number``.
- Every write (creating, renaming or deleting a study, telling a trial, saving a note) raises
  `ReadOnlyError`; optuna-dashboard's server is also stopped from sending any (see
  `studies.dashboard.server`).

Reads go through the `Watcher`s the dashboard shares, so optuna-dashboard's polling costs one
aggregate query per study while nothing changes. Needs the ``dashboard`` extra (optuna).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Container
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

from studies.dashboard.snapshot import Snapshot
from studies.errors import StudyError, StudyNotFoundError

__all__ = ["OptunaView", "ReadOnlyError", "TRIAL_ID_BASE"]

#: A trial's Optuna id is ``study_id * TRIAL_ID_BASE + number``.
TRIAL_ID_BASE = 10**8
_STATES = {
    "COMPLETE": TrialState.COMPLETE,
    "FAILED": TrialState.FAIL,
    "RUNNING": TrialState.RUNNING,
    "WAITING": TrialState.WAITING,
}
_NOTE_CHUNK = 2045  # optuna-dashboard's SYSTEM_ATTR_MAX_LENGTH
#: FAILED trials (the newest) whose error is their optuna-dashboard note; the dashboard scans
#: every note key for every trial it lists, so more would slow it.
MAX_TRIAL_NOTES = 50


class ReadOnlyError(StudyError):
    """The dashboard's view of a study storage was asked to write."""


class OptunaView(BaseStorage):
    """A read-only Optuna storage over this project's studies (module docstring).

    Args:
        snapshot: ``name -> Snapshot``: the study as stored now (the dashboard's `Watcher`s).
        names: ``() -> names`` of the studies shown.
        note: ``snapshot -> Markdown`` of the study's note (links to this project's views).
        figures: ``snapshot -> {id: Plotly figure}`` drawn on the study's page (ids: letters,
            digits, ``-``, ``_``).
    """

    def __init__(
        self,
        snapshot: Callable[[str], Snapshot],
        names: Callable[[], list[str]],
        note: Callable[[Snapshot], str] | None = None,
        figures: Callable[[Snapshot], dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._names = names
        self._note = note
        self._figures = figures
        self._ids: dict[int, str] = {}

    # ------------------------------------------------------------------ studies
    def _snap(self, study_id: int) -> Snapshot:
        name = self._ids.get(study_id)
        if name is None:
            self.get_all_studies()
            name = self._ids.get(study_id)
        if name is None:
            raise KeyError(f"No study with id {study_id}.")
        return self._snapshot(name)

    def get_all_studies(self) -> list[FrozenStudy]:
        out = []
        for name in self._names():
            try:
                snap = self._snapshot(name)
            except StudyNotFoundError:
                continue
            self._ids[snap.record.id] = name
            out.append(self._frozen_study(snap))
        return out

    def _frozen_study(self, snap: Snapshot) -> FrozenStudy:
        key = "optuna:study"
        if key not in snap.cache:
            snap.cache[key] = FrozenStudy(
                snap.name,
                None,
                self._user_attrs(snap),
                self._system_attrs(snap),
                snap.record.id,
                directions=_directions(snap),
            )
        return snap.cache[key]  # type: ignore[no-any-return]

    @staticmethod
    def _user_attrs(snap: Snapshot) -> dict[str, Any]:
        return {
            "storage": snap.url,
            "constraints": ", ".join(snap.constraints) or "none",
            "budget": snap.record.budget,
            "seed": snap.record.seed,
        }

    def _system_attrs(self, snap: Snapshot) -> dict[str, Any]:
        """optuna-dashboard's keys: metric names, notes, Plotly figures (as its `save_note` and
        `save_plotly_graph_object` would store them)."""
        import json

        attrs: dict[str, Any] = {"study:metric_names": list(snap.objectives)}
        if self._note is not None:
            _chunks(attrs, "dashboard:note_ver", "dashboard:note_str:", self._note(snap))
        failed = [t for t in snap.trials if t.state == "FAILED"][-MAX_TRIAL_NOTES:]
        for t in failed:
            tid = snap.record.id * TRIAL_ID_BASE + t.number
            body = f"**FAILED** ({t.worker or 'by hand'}):\n\n```\n{t.error or '(no message)'}\n```"
            _chunks(attrs, f"dashboard:{tid}:note_ver", f"dashboard:{tid}:note_str:", body)
        for key, fig in (self._figures(snap) if self._figures is not None else {}).items():
            text = json.dumps({"data": fig["data"], "layout": fig["layout"]}, default=float)
            _chunks(attrs, None, f"dashboard:plot_data:{key}:", text)
        return attrs

    def get_study_id_from_name(self, study_name: str) -> int:
        try:
            snap = self._snapshot(study_name)
        except StudyNotFoundError as err:
            raise KeyError(str(err)) from None
        self._ids[snap.record.id] = study_name
        return snap.record.id

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._snap(study_id).name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return _directions(self._snap(study_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(self._frozen_study(self._snap(study_id)).user_attrs)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(self._frozen_study(self._snap(study_id)).system_attrs)

    # ------------------------------------------------------------------ trials
    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        snap = self._snap(study_id)
        key = "optuna:trials"
        if key not in snap.cache:
            snap.cache[key] = [_frozen_trial(snap, t) for t in snap.trials]
        trials: list[FrozenTrial] = snap.cache[key]
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return [_copy(t) for t in trials] if deepcopy else list(trials)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        study_id, number = divmod(int(trial_id), TRIAL_ID_BASE)
        trials = self.get_all_trials(study_id, deepcopy=False)
        if not 0 <= number < len(trials) or trials[number].number != number:
            raise KeyError(f"No trial with id {trial_id}.")
        return trials[number]

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        self.get_trial(study_id * TRIAL_ID_BASE + trial_number)
        return study_id * TRIAL_ID_BASE + trial_number

    # ------------------------------------------------------------------ writes: refused
    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyError(
            "This is a read-only view of a rewrite-tuner study storage: it never writes (no new "
            "study, note, rename, delete or told trial). Change studies with the `tuner` "
            "commands or the studies API."
        )

    create_new_study = _refuse
    delete_study = _refuse
    set_study_user_attr = _refuse
    set_study_system_attr = _refuse
    create_new_trial = _refuse
    set_trial_param = _refuse
    set_trial_state_values = _refuse
    set_trial_intermediate_value = _refuse
    set_trial_user_attr = _refuse
    set_trial_system_attr = _refuse


def _chunks(attrs: dict[str, Any], version: str | None, prefix: str, text: str) -> None:
    """Store ``text`` in ``attrs`` as optuna-dashboard splits it (``prefix0``, ``prefix1``...,
    with a version key for notes)."""
    if version is not None:
        attrs[version] = 1
    for i in range(0, max(len(text), 1), _NOTE_CHUNK):
        attrs[f"{prefix}{i // _NOTE_CHUNK}"] = text[i : i + _NOTE_CHUNK]


def _directions(snap: Snapshot) -> list[StudyDirection]:
    return [
        StudyDirection.MAXIMIZE if d == "maximize" else StudyDirection.MINIMIZE
        for d in snap.objectives.values()
    ]


def distributions(space: Any) -> dict[str, tuple[str, str | None, BaseDistribution]]:
    """Optuna parameter name -> ``(parameter, simplex part or None, distribution)`` of a
    `spaces.Space` (`Fixed` parameters left out; a `Simplex` as one column per part)."""
    from spaces import Bool, Choice, Fixed, Float, Int, Simplex

    out: dict[str, tuple[str, str | None, BaseDistribution]] = {}
    for name, p in space.params.items():
        if isinstance(p, Float):
            out[name] = (name, None, FloatDistribution(p.low, p.high, log=p.log))
        elif isinstance(p, Int):
            out[name] = (name, None, IntDistribution(int(p.low), int(p.high), log=p.log))
        elif isinstance(p, Choice):
            out[name] = (name, None, CategoricalDistribution(tuple(p.values)))
        elif isinstance(p, Bool):
            out[name] = (name, None, CategoricalDistribution((False, True)))
        elif isinstance(p, Simplex):
            for part in p.names:
                out[f"{name}.{part}"] = (name, part, FloatDistribution(0.0, 1.0))
        elif not isinstance(p, Fixed):  # pragma: no cover - a new parameter type
            continue
    return out


def _params(snap: Snapshot, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    key = "optuna:dists"
    if key not in snap.cache:
        snap.cache[key] = distributions(snap.space)
    params, dists = {}, {}
    for col, (name, part, dist) in snap.cache[key].items():
        value = config.get(name)
        if part is not None:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        try:
            if not dist._contains(dist.to_internal_repr(value)):
                continue  # outside the space (a trial told by hand): not a column
        except (ValueError, TypeError):
            continue
        params[col], dists[col] = value, dist
    return params, dists


def _constraint_values(snap: Snapshot, outcome: dict[str, float]) -> list[float] | None:
    """Optuna's ``constraints`` of a trial: ``value - bound`` for ``<=``, ``bound - value`` for
    ``>=`` (met when <= 0); None when a metric is missing."""
    from tuner.problem import parse_constraint

    out = []
    for spec in snap.constraints:
        c = parse_constraint(spec)
        if c.name not in outcome:
            return None
        value = float(outcome[c.name])
        out.append(value - c.bound if c.op == "<=" else c.bound - value)
    return out


def _frozen_trial(snap: Snapshot, t: Any) -> FrozenTrial:
    from tuner.trial import split_run_metric

    params, dists = _params(snap, t.config)
    attrs: dict[str, Any] = {
        k: v for k, v in sorted(t.metrics.items()) if split_run_metric(k) is None
    }
    attrs.update(
        {
            "worker": t.worker,
            "seconds": t.duration,
            "heartbeat": _iso(t.heartbeat),
            "retry_of": t.retry_of,
        }
    )
    if t.error:
        attrs["error"] = t.error
    system: dict[str, Any] = {}
    if t.state == "COMPLETE" and snap.constraints:
        got = _constraint_values(snap, {**t.metrics, **(t.values or {})})
        if got is not None:
            system["constraints"] = got
    values = [float(t.values[k]) for k in snap.objectives] if t.state == "COMPLETE" else None
    return FrozenTrial(
        number=t.number,
        state=_STATES[str(t.state)],
        value=None,
        values=values,
        datetime_start=_time(t.started),
        datetime_complete=_time(t.finished),
        params=params,
        distributions=dists,
        user_attrs={k: v for k, v in attrs.items() if v is not None},
        system_attrs=system,
        intermediate_values={},
        trial_id=snap.record.id * TRIAL_ID_BASE + t.number,
    )


def _time(ts: float | None) -> _dt.datetime | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def _copy(t: FrozenTrial) -> FrozenTrial:
    import copy

    return copy.deepcopy(t)
