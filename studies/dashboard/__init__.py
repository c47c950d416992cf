"""Watch a study live in the browser, or write it to one HTML file: ``tuner dashboard`` and
``tuner report``.

- `readonly.ReadOnlyStorage`: the storage read without writing it or taking its lock.
- `snapshot.Watcher`: the latest `snapshot.Snapshot` of a study, re-read only when it changed.
- `views` and `panels`: the views (history, Pareto front, parallel coordinates, rule priors,
  structure, running trials, failures, time split, trials), computed from a snapshot.
- `optuna_storage.OptunaView`: the storage as a read-only Optuna storage, for optuna-dashboard.
- `server.Dashboard` / `server.serve`: optuna-dashboard and this project's page on one server.
- `report.write_report`: the same views in one self-contained file.
- `hooks.Hooks`: what an application adds (the rewrite application: `rewrite_tuner.dashboard`).

Needs the ``dashboard`` extra (optuna-dashboard, optuna, plotly); see docs/dashboard.md.
"""

from __future__ import annotations

from lazyimport import lazy_exports
from studies.dashboard.hooks import Exported, Hooks, Panel, Phases

__all__ = [
    "Dashboard",
    "Exported",
    "Hooks",
    "Panel",
    "Phases",
    "ReadOnlyStorage",
    "serve",
    "write_report",
]

_LAZY = {
    "Dashboard": "studies.dashboard.server",
    "serve": "studies.dashboard.server",
    "ReadOnlyStorage": "studies.dashboard.readonly",
    "write_report": "studies.dashboard.report",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
