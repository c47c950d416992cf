"""`TunerOptions`: the numerical knobs of a proposal, validated once."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tuner.errors import InvalidSpecError

__all__ = ["TunerOptions"]


@dataclass(frozen=True)
class TunerOptions:
    """How hard each proposal works. The defaults suit the tuner's benchmarks; tests cap them.

    Attributes:
        num_restarts: Starting points for the gradient-based acquisition optimizer.
        raw_samples: Candidate points scored to pick those starting points.
        maxiter: Iteration cap of each optimizer run (L-BFGS-B, or SLSQP with a simplex).
        mc_samples: Quasi-Monte-Carlo samples of the acquisition function.
        fit_maxiter: Iteration cap of the GP hyper-parameter fit (`None`: BoTorch's 15000). At
            150 the fitted marginal log likelihood is within 0.01 of the uncapped fit on the
            benchmark problems, while fits on the 16-d simplex problem get 3 times faster.
        local_fraction: Share of `raw_samples` drawn as perturbations of the best trials (the
            rest is a scrambled Sobol sample of the space). 0 by measurement (it was 0.5): on
            `benchmarks/bench_tuner.py`'s problems (5 seeds) the hypervolume at 40 trials went
            from 0.309 to 0.340 on DTLZ2 (Ax: 0.330), 1.667 to 1.747 on simplex16 and 57.03 to
            57.08 on BraninCurrin (at 20: 48.96 to 47.19); on the main job
            (`benchmarks/bench_peers.py`) it ended level (1.020) with picks that transfer as
            well or better (held-out steps ratio 0.24x / 0.16x against 0.25x / 0.19x).
        local_scale: Standard deviation of those perturbations on the unit cube.
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
    local_fraction: float = 0.0
    local_scale: float = 0.1
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
        for name in ("local_fraction", "local_scale", "ref_point_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InvalidSpecError(f"TunerOptions.{name} must be a number, got {value!r}.")
        if not 0.0 <= self.local_fraction <= 1.0:
            raise InvalidSpecError(
                f"TunerOptions.local_fraction must lie in [0, 1], got {self.local_fraction!r}."
            )
        for name in ("local_scale", "ref_point_scale"):
            if not getattr(self, name) > 0.0:
                raise InvalidSpecError(
                    f"TunerOptions.{name} must be > 0, got {getattr(self, name)!r}."
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
        """Rebuild from `to_dict` output.

        Raises:
            InvalidSpecError: For unknown keys or invalid values.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidSpecError(f"Unknown TunerOptions keys {unknown}; known: {sorted(known)}.")
        return cls(**dict(d))
