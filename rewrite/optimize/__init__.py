"""Stochastic multi-objective rewrite search driven by rule priors (Tapestry-style).

`search` (re-exported as `rewrite.search`) runs the Pareto search, or a baseline, on a graph and
returns a `SearchResult`; `search_suite` runs one configuration over several graphs and seeds.
`SearchConfig` holds every knob with its valid range.
`RulePriors` holds the rule firing weights; `PriorsFile` (priors, knobs, provenance) and
`read_priors_file` are the versioned JSON format's document and its one reader (also the studies
export format).
Pareto utilities live in `rewrite.optimize.pareto`.
"""

from rewrite.errors import PriorsError, SearchConfigError, SearchError
from rewrite.optimize.api import default_rules, make_verifier, search
from rewrite.optimize.config import KNOBS, STRATEGIES, SearchConfig
from rewrite.optimize.priors import PriorsFile, RulePriors, read_priors_file
from rewrite.optimize.result import (
    MACHINE_METRICS,
    RULE_COUNTERS,
    RunStats,
    SearchResult,
    Solution,
    Step,
)
from rewrite.optimize.suite import SuiteResult, search_suite

__all__ = [
    "KNOBS",
    "RULE_COUNTERS",
    "MACHINE_METRICS",
    "STRATEGIES",
    "PriorsError",
    "PriorsFile",
    "RulePriors",
    "RunStats",
    "SearchConfig",
    "SearchConfigError",
    "SearchError",
    "SearchResult",
    "Solution",
    "Step",
    "SuiteResult",
    "read_priors_file",
    "default_rules",
    "make_verifier",
    "search",
    "search_suite",
]
