"""`TunerOptions`: the numerical knobs of a proposal, validated once."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tuner.errors import InvalidSpecError

__all__ = ["REMOVED", "TunerOptions"]

REMOVED: dict[str, Any] = {"local_fraction": 0.0, "local_scale": None}
"""Options stored by earlier versions -> the value that behaves as today (None: any value).
``local_fraction`` drew that share of the acquisition optimizer's raw samples around the best
trials (default 0 since 2026-11-27; docs/tuner.md), ``local_scale`` their spread."""


@dataclass(frozen=True)
class TunerOptions:
    """How hard each proposal works. The defaults suit the tuner's benchmarks; tests cap them.

    The acquisition optimizer's `raw_samples` are a scrambled Sobol sample of the space.

    Attributes:
        num_restarts: Starting points for the gradient-based acquisition optimizer.
        raw_samples: Candidate points scored to pick those starting points.
        maxiter: Iteration cap of each optimizer run (L-BFGS-B, or SLSQP with a simplex).
        mc_samples: Quasi-Monte-Carlo samples of the acquisition function.
        fit_maxiter: Iteration cap of the GP hyper-parameter fit (`None`: BoTorch's 15000;
            the default's measurement: docs/tuner.md).
        ref_point_scale: The inferred reference point is ``nadir - scale * (ideal - nadir)``.
        max_failed_pending: At most this many of the latest failed configurations are passed to
            the acquisition as pending points.
        min_completed: Completed trials needed before the model replaces the Sobol design.
        start_with_default: Whether the first trial of the initial design is the space's default
            configuration (the hand-tuned baseline, or the center of the space).
    """

    num_restarts: int = 5
    raw_samples: int = 256
    maxiter: int = 200
    mc_samples: int = 128
    fit_maxiter: int | None = 150
    ref_point_scale: float = 0.1
    max_failed_pending: int = 32
    min_completed: int = 2
    start_with_default: bool = True

    def __post_init__(self) -> None:
        for name in ("num_restarts", "raw_samples", "maxiter", "mc_samples", "min_completed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSpecError(f"TunerOptions.{name} must be an int >= 1, got {value!r}.")
        if self.fit_maxiter is not None and (
            isinstance(self.fit_maxiter, bool)
            or not isinstance(self.fit_maxiter, int)
            or self.fit_maxiter < 1
        ):
            raise InvalidSpecError(
                f"TunerOptions.fit_maxiter must be None or an int >= 1, got {self.fit_maxiter!r}."
            )
        if self.raw_samples < self.num_restarts:
            raise InvalidSpecError(
                f"`raw_samples >= num_restarts` must hold, but got "
                f"({self.raw_samples=}, {self.num_restarts=})."
            )
        scale = self.ref_point_scale
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0.0:
            raise InvalidSpecError(
                f"TunerOptions.ref_point_scale must be a number > 0, got {scale!r}."
            )
        if not isinstance(self.start_with_default, bool):
            raise InvalidSpecError(
                f"TunerOptions.start_with_default must be a bool, got {self.start_with_default!r}."
            )
        if (
            isinstance(self.max_failed_pending, bool)
            or not isinstance(self.max_failed_pending, int)
            or self.max_failed_pending < 0
        ):
            raise InvalidSpecError(
                f"TunerOptions.max_failed_pending must be an int >= 0, got "
                f"{self.max_failed_pending!r}."
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able copy; read back by `TunerOptions.from_dict`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TunerOptions:
        """Rebuild from `to_dict` output (or from stored options that name a removed option
        at the value that behaves as today, `REMOVED`: it is dropped).

        Raises:
            InvalidSpecError: For unknown keys or invalid values, or a removed option set to
                another value.
        """
        d = _without_removed(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidSpecError(f"Unknown TunerOptions keys {unknown}; known: {sorted(known)}.")
        return cls(**dict(d))


def _without_removed(d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` without the `REMOVED` options that hold a value that behaves as today.

    Raises:
        InvalidSpecError: A removed option holds another value (it cannot run as stored).
    """
    out = dict(d)
    for name, today in REMOVED.items():
        if name not in out:
            continue
        value = out.pop(name)
        if today is not None and value != today:
            raise InvalidSpecError(
                f"TunerOptions.{name} was removed (it is always {today} now), but these options "
                f"set it to {value!r}: they cannot run as they were stored. Drop {name!r} from "
                "the options (e.g. StudySettings.tuner_options) to run with today's behaviour."
            )
    return out
