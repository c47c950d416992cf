"""Stochastic multi-objective rewrite search driven by rule priors (Tapestry-style).

`search` (re-exported as `rewrite.search`) runs the Pareto search, or a baseline, on a graph and
returns a `SearchResult`; `search_suite` runs one configuration over several graphs.
`SearchConfig` holds every knob with its valid range; `config_from_params` maps a tuner's
configuration (knob values plus rule priors, a plain dict) back onto it.
`RulePriors` holds the rule firing priors; `PriorsFile` and `read_priors_file` are the versioned
JSON format's document and its one reader (also the studies export format).
Pareto utilities live in `rewrite.optimize.pareto`.
"""

from rewrite.errors import PriorsError, SearchConfigError, SearchError
from rewrite.optimize.api import default_rules, make_verifier, search
from rewrite.optimize.config import (
    DEFAULT_TUNED,
    FAMILY_TUNED,
    KNOBS,
    STRATEGIES,
    SearchConfig,
    config_from_params,
    is_prior_param,
    priors_from_params,
)
from rewrite.optimize.informed import PriorFamily, RuleEvidence
from rewrite.optimize.priors import PriorsFile, RulePriors, read_priors_file
from rewrite.optimize.result import (
    MACHINE_METRICS,
    RULE_COUNTERS,
    RunStats,
    SearchResult,
    Solution,
    Step,
)
from rewrite.optimize.suite import SCORES, Baseline, SuiteResult, benchmark_rules, search_suite

__all__ = [
    "DEFAULT_TUNED",
    "FAMILY_TUNED",
    "KNOBS",
    "SCORES",
    "Baseline",
    "PriorFamily",
    "RuleEvidence",
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
    "benchmark_rules",
    "config_from_params",
    "is_prior_param",
    "priors_from_params",
    "read_priors_file",
    "default_rules",
    "make_verifier",
    "search",
    "search_suite",
]
