"""The tuning side's vocabulary of the rewrite search's knobs and rule priors.

The engine (`rewrite.optimize.config`) knows each knob's valid range and nothing of tuning. Here
are the tuning ranges (`TUNE_RANGES`), the knobs a space exposes by default (`DEFAULT_TUNED`,
`FAMILY_TUNED`), the names of the prior parameters of the space (`PRIOR_WEIGHT` ...), and the
mapping of one configuration of the space back onto a `SearchConfig` and rule priors
(`config_from_params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rewrite.optimize.config import SearchConfig
from rewrite_tuner.prior_family import PriorFamily

__all__ = [
    "DEFAULT_TUNED",
    "FAMILY_PREFIX",
    "FAMILY_TUNED",
    "PRIOR_MODEL",
    "PRIOR_SPECIFICITY",
    "PRIOR_WEIGHT",
    "TUNE_RANGES",
    "TuneRange",
    "config_from_params",
    "is_prior_param",
    "priors_from_params",
]


class TuneRange(NamedTuple):
    """The range a tuner explores for one knob (inside the knob's valid range, `KNOBS`).

    Attributes:
        low: Lower bound.
        high: Upper bound.
        log: Whether the tuner explores it on a log scale.
    """

    low: float
    high: float
    log: bool = False


TUNE_RANGES: dict[str, TuneRange] = {
    "population": TuneRange(4, 128, log=True),
    "archive_size": TuneRange(8, 256, log=True),
    "tau": TuneRange(0.05, 20.0, log=True),
    "m": TuneRange(1, 8),
    "alpha": TuneRange(1.0, 1.5),
    "beta": TuneRange(0.0, 1.0),
    "eta": TuneRange(0.01, 1.0, log=True),
    "restart_prob": TuneRange(0.0, 0.5),
    "verify_rate": TuneRange(0.0, 1.0),
    "max_fusion_size": TuneRange(2, 32, log=True),
    "window": TuneRange(10, 2000, log=True),
    "epsilon": TuneRange(1e-7, 1e-2, log=True),
    "max_size_ratio": TuneRange(1.0, 4.0),
}
"""Default tuning range of every tunable knob; the other knobs (``time_budget``, ``workers``,
``island_steps``, ``max_steps``, ``devices``) describe the run or the machine and are never
tuned."""

DEFAULT_TUNED = (
    "population",
    "tau",
    "m",
    "alpha",
    "beta",
    "eta",
    "restart_prob",
    "verify_rate",
    "max_fusion_size",
    "window",
    "epsilon",
)
"""Knobs a tuner's space exposes by default (the BO knobs of the design notes)."""

FAMILY_TUNED = ("beta", "tau", "alpha", "eta", "restart_prob", "verify_rate")
"""Knobs tuned beside an informed prior family: those that changed the anytime hypervolume or
the effort of searches on the zoo (``population``, ``archive_size`` and ``max_fusion_size`` did
not at small step budgets, ``m`` above 1 only cost work; see `benchmarks/bench_transfer.py`)."""

PRIOR_WEIGHT = "prior_weight"
"""Parameter of an informed prior family's space: 0 = uniform priors, 1 = the informed member."""
PRIOR_SPECIFICITY = "prior_specificity"
"""Parameter of an informed prior family's space: the exponent of the rules' pattern size."""
FAMILY_PREFIX = "family_"
"""Prefix of an informed prior family's per-rule-family multipliers (``family_<name>``)."""
PRIOR_MODEL = "prior_model"
"""Fixed parameter carrying the informed `PriorFamily` itself."""
_PRIOR_KEYS = ("priors", PRIOR_WEIGHT, PRIOR_SPECIFICITY, PRIOR_MODEL)


def config_from_params(
    params: Mapping[str, Any], base: SearchConfig | None = None
) -> tuple[SearchConfig, dict[str, float] | None]:
    """Split one configuration of the tuner's space into a `SearchConfig` and the priors dict.

    Args:
        params: A configuration (knob values plus an optional ``"priors"`` dict).
        base: Config supplying every knob ``params`` leaves out.

    Returns:
        ``(config, priors)``; ``priors`` is None when ``params`` has no ``"priors"`` entry.

    Raises:
        SearchConfigError: On unknown knobs or invalid values.
    """
    knobs = {k: v for k, v in params.items() if not is_prior_param(k)}
    return SearchConfig.from_dict(knobs, base), priors_from_params(params)


def is_prior_param(name: str) -> bool:
    """Whether a parameter of the tuner's space sets the rule priors (the per-rule ``"priors"``
    simplex or a prior-family parameter) rather than a search knob."""
    return name in _PRIOR_KEYS or name.startswith(FAMILY_PREFIX)


def priors_from_params(params: Mapping[str, Any]) -> dict[str, float] | None:
    """The rule priors a configuration of the tuner's space names: its ``"priors"`` simplex, or the
    member of its informed ``"prior_model"`` family; None when it names neither.

    Raises:
        PriorsError: On a malformed prior family or parameter.
    """
    if PRIOR_MODEL in params:
        family = PriorFamily.from_dict(params[PRIOR_MODEL])
        weights = {
            f: float(params[f"{FAMILY_PREFIX}{f}"])
            for f in family.family_names
            if f"{FAMILY_PREFIX}{f}" in params
        }
        return family.priors(
            float(params.get(PRIOR_WEIGHT, 0.0)),
            float(params.get(PRIOR_SPECIFICITY, 0.0)),
            weights or None,
        )
    priors = params.get("priors")
    return dict(priors) if priors is not None else None
