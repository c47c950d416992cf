"""`SaturationLimits`: the e-graph limits and the extraction method of one saturation."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewrite.errors import SearchConfigError

__all__ = ["EXTRACTIONS", "SaturationLimits"]

EXTRACTIONS = ("ilp", "greedy")
"""Extraction methods: ILP (with greedy as its fallback) or greedy alone."""


@dataclass(frozen=True)
class SaturationLimits:
    """Limits of equality saturation (`strategy="saturate"`), validated on construction.

    The defaults are Tensat's (``run_exp_main.sh``: 50,000 e-nodes, 15 iterations); the search's
    ``time_budget`` and ``max_steps`` bound the run as well.

    Attributes:
        nodes: Stop adding rewrites once the e-graph holds this many e-nodes, >= 1.
        iterations: Match-and-apply iterations at most, >= 1.
        time: Seconds of matching and applying (None: only the search's ``time_budget``).
        extraction: ``"ilp"`` (greedy too; the ILP's graph when it finishes in time, greedy's
            otherwise, and the result says which) or ``"greedy"``.
        ilp_time: Seconds the ILP solver may run, > 0.
        matches: Matches of one rule applied per iteration at most (the rest wait for the next
            iterations, so a rule that matches a lot cannot starve the others, as egg's backoff
            scheduler does), >= 1.
        multi_iterations: Iterations in which multi-root rules (two products of one input
            merged, ...) apply, >= 0: their matches grow with the square of the e-graph, so
            Tensat applies them in the first iteration or two only (``iter_multi``; 1 here).
        expand: E-nodes tried per input class for rules that read one level beyond their
            pattern (`Rule.extra_nodes`: fusions), >= 1.
        verify: Region-check every rewrite before it joins the e-graph (as the engine checks
            every rewrite of a reported graph).
    """

    nodes: int = 50_000
    iterations: int = 15
    time: float | None = None
    extraction: str = "ilp"
    ilp_time: float = 30.0
    matches: int = 2_000
    multi_iterations: int = 1
    expand: int = 8
    verify: bool = True

    def __post_init__(self) -> None:
        for name in ("nodes", "iterations", "matches", "expand", "multi_iterations"):
            v = getattr(self, name)
            low = 0 if name == "multi_iterations" else 1
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
                raise SearchConfigError(
                    f"SaturationLimits.{name} must be an int >= {low}, got {v!r}."
                )
        for name in ("time", "ilp_time"):
            v = getattr(self, name)
            if v is None and name == "time":
                continue
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not (math.isfinite(v) and v > 0)
            ):
                raise SearchConfigError(
                    f"SaturationLimits.{name} must be a number of seconds > 0"
                    f"{' or None' if name == 'time' else ''}, got {v!r}."
                )
        if self.extraction not in EXTRACTIONS:
            raise SearchConfigError(
                f"SaturationLimits.extraction must be one of {EXTRACTIONS}, got "
                f"{self.extraction!r}."
            )
        if not isinstance(self.verify, bool):
            raise SearchConfigError(f"SaturationLimits.verify must be a bool, got {self.verify!r}.")

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def coerce(cls, limits: SaturationLimits | Mapping[str, Any] | None) -> SaturationLimits:
        """``limits`` as a `SaturationLimits` (a dict of fields or None for the defaults).

        Raises:
            SearchConfigError: On an unknown field or an invalid value.
        """
        if limits is None:
            return cls()
        if isinstance(limits, cls):
            return limits
        if not isinstance(limits, Mapping):
            raise SearchConfigError(
                f"saturation limits must be a SaturationLimits, a dict of its fields or None, "
                f"got {limits!r}."
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(limits) - set(names))
        if unknown:
            raise SearchConfigError(f"Unknown saturation limits {unknown}; the fields are {names}.")
        return cls(**dict(limits))
