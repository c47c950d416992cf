"""Graph equivalence checks by random testing (finite field or float), on numpy or cupy.

Public names: `Verifier` (``check``, ``check_rewrite``, ``check_many``, ``check_site``,
``check_rule``), `CheckResult`, `VerdictCache` / `default_cache` (the per-machine SQLite cache),
`get_backend` / `Backend`, `region_graphs`, shape reduction (`reduce_pair`, `size_relations`,
`solve_sizes`), and the field constants `PRIME`.
"""

from __future__ import annotations

from rewrite.verify.backend import BACKENDS, Backend, cupy_works, get_backend
from rewrite.verify.cache import VerdictCache, default_cache, default_cache_dir
from rewrite.verify.checker import MODES, SHAPES, TOLERANCES, CheckResult, Verifier
from rewrite.verify.degree import degree_bound
from rewrite.verify.field import PRIME, field_const
from rewrite.verify.reduce import reduce_graph, reduce_pair
from rewrite.verify.region import region_graphs
from rewrite.verify.sizes import size_relations, solve_sizes

__all__ = [
    "BACKENDS",
    "MODES",
    "PRIME",
    "SHAPES",
    "TOLERANCES",
    "Backend",
    "CheckResult",
    "VerdictCache",
    "Verifier",
    "cupy_works",
    "default_cache",
    "default_cache_dir",
    "degree_bound",
    "field_const",
    "get_backend",
    "reduce_graph",
    "reduce_pair",
    "region_graphs",
    "size_relations",
    "solve_sizes",
]
