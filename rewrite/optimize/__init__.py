"""Stochastic multi-objective rewrite search driven by rule priors (Tapestry-style).

Public names: `SearchConfig` (every knob and its range), `search_space` (the tuner's space over
those knobs and the rule priors), `RulePriors` (rule firing priors, versioned JSON), and the
Pareto utilities in `rewrite.optimize.pareto`.
"""

from rewrite.optimize.config import (
    DEFAULT_TUNED,
    KNOBS,
    STRATEGIES,
    SearchConfig,
    config_from_params,
    search_space,
)
from rewrite.optimize.errors import PriorsError, SearchConfigError, SearchError
from rewrite.optimize.priors import RulePriors

__all__ = [
    "DEFAULT_TUNED",
    "KNOBS",
    "STRATEGIES",
    "PriorsError",
    "RulePriors",
    "SearchConfig",
    "SearchConfigError",
    "SearchError",
    "config_from_params",
    "search_space",
]
