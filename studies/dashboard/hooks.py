"""What an application adds to the dashboard and the report: `Hooks`, and the `Panel` it can add.

The generic views (`studies.dashboard.views`) know nothing of any application. An application
passes a `Hooks` to the ``tuner dashboard`` and ``tuner report`` commands
(`studies.cli.dashboard_command`, `studies.cli.report_command`), as it passes its weights reader to
``tuner plot``: the rewrite application (`rewrite_tuner.dashboard`) reads the rule priors of its
informed prior family, finds the priors file a study exported, adds the calibration and the
validation to the time split, and adds the held-out validation table as a panel of its own.

Every hook is called with a `studies.dashboard.snapshot.Snapshot` (read-only: do not modify it)
from a request thread of the dashboard; it must not write anything and should return within
a second or so (it runs again at every change of the study). A hook that raises is shown as
that panel's error; the rest of the page is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studies.dashboard.snapshot import Snapshot
    from studies.weights import WeightsOf

__all__ = ["Exported", "Hooks", "Panel", "Phases"]


@dataclass(frozen=True)
class Panel:
    """One view of the page: a tab with HTML and Plotly figures.

    Attributes:
        id: Short identifier, unique on the page (letters, digits, ``-``); the tab's anchor.
        title: The tab's label.
        html: The panel's body (trusted HTML: escape every value with `html.escape`).
        figures: Plotly figures as JSON-able dicts (``{"id": ..., "data": [...], "layout":
            {...}}``); each is drawn into the element of that ``id`` in ``html``.
        numbers: What the panel shows as plain numbers, for tests and scripts (JSON-able).
    """

    id: str
    title: str
    html: str
    figures: tuple[dict[str, Any], ...] = ()
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The panel as the page receives it."""
        return {
            "id": self.id,
            "title": self.title,
            "html": self.html,
            "figures": list(self.figures),
            "numbers": self.numbers,
        }


@dataclass(frozen=True)
class Exported:
    """The trial whose priors a study exported, and from where that is known.

    Attributes:
        trial: The trial's number.
        source: Where the export is (a file path), or "" when nothing was exported (then
            ``trial`` is the one the default pick of ``tuner export`` would export).
        note: One line shown under the bars (e.g. whether it beat the defaults).
    """

    trial: int
    source: str = ""
    note: str = ""


@dataclass(frozen=True)
class Hooks:
    """An application's additions to the dashboard and the report (module docstring).

    Attributes:
        weights_of: Reads a trial's weights and names them (`studies.weights.WeightsOf`; default:
            a Simplex parameter's, in generic words).
        exported: The trial whose priors the study exported, or None (then the trial that the
            default pick of ``tuner export`` chooses is shown).
        phases: Seconds spent outside the trials, in order (e.g. ``{"calibration": 40.0}`` before
            the trials and ``{"validation": 30.0}`` after), as ``(before, after)``; or a dict
            ``"measured"`` of the whole split a finished run recorded.
        panels: Extra panels, each ``snapshot -> Panel`` or None (nothing to show for that
            study).
    """

    weights_of: WeightsOf | None = None
    exported: Callable[[Snapshot], Exported | None] | None = None
    phases: Callable[[Snapshot], Phases] | None = None
    panels: Sequence[Callable[[Snapshot], Panel | None]] = ()


@dataclass(frozen=True)
class Phases:
    """Wall-clock seconds of a study's run spent outside its trials (`Hooks.phases`).

    Attributes:
        before: Phases before the first trial, in order (e.g. the calibration).
        after: Phases after the last trial (e.g. the validation).
        measured: The whole split as the run that drove the study measured it (phase -> wall
            seconds, adding up to the run's total), when one recorded it; shown instead of the
            estimate from the stored times.
        source: Where these numbers come from (shown under the split).
    """

    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] | None = None
    source: str = ""
