"""Equality saturation as a search strategy: an egglog e-graph of the rule catalogue.

``rewrite.search(graph, {"strategy": "saturate"})`` (or `saturate`) adds the input graph to an
e-graph (egglog), applies every rule it can express at every match until the e-graph saturates
or a limit (`SaturationLimits`: e-nodes, iterations, time; the search's ``time_budget`` and
``max_steps``) stops it, and extracts, with the search's own cost model, the cheapest graph for
each objective (greedy, and by ILP for the first objective when it finishes). It returns the
same `SearchResult` as the other strategies; ``strategy_info`` holds the e-graph's figures.

* `rewrite.optimize.saturate.translate`: rules -> egglog match rules; `inexpressible` lists the
  rules an e-graph cannot run, with the reason.
* `rewrite.optimize.saturate.egraph`: the e-graph and the Python side's names for it.
* `rewrite.optimize.saturate.apply`: one rule at one match (region graph, rule, verification).
* `rewrite.optimize.saturate.extract`: greedy and ILP extraction, and the extracted IR graph.
* `rewrite.optimize.saturate.runner`: the loop, the limits and the result.

Needs the ``egglog`` package (``pip install 'egglog==13.2.0'``); it is imported when a
saturation starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.ir import Graph
from rewrite.optimize.result import SearchResult
from rewrite.optimize.saturate.limits import EXTRACTIONS, SaturationLimits
from rewrite.optimize.saturate.translate import Skipped, inexpressible
from rewrite.rules.base import Rule

__all__ = ["EXTRACTIONS", "SaturationLimits", "Skipped", "inexpressible", "saturate"]


def saturate(
    graph: Graph,
    rules: Sequence[Rule] | None = None,
    *,
    device: Any = "h100",
    limits: SaturationLimits | Mapping[str, Any] | None = None,
    seed: int = 0,
    config: Mapping[str, Any] | None = None,
    verify_cache: Any = "default",
) -> SearchResult:
    """Equality saturation of ``graph``: ``rewrite.search`` with ``strategy="saturate"``.

    Args:
        graph: The input graph.
        rules: The rules (default: the verified catalogue).
        device: Cost-model device profile.
        limits: `SaturationLimits` (or a dict of its fields; None: Tensat's defaults).
        seed: Seed of the verifier's random tests (saturation itself makes no random choice).
        config: Other search knobs (``objectives``, ``time_budget``, ``max_steps``, ...);
            ``max_steps`` (rewrites added) defaults to no limit here.
        verify_cache: Verdict cache of the random tests (see `rewrite.optimize.make_verifier`).

    Returns:
        The `SearchResult`.
    """
    from rewrite.optimize.api import search

    knobs = {"max_steps": 10**12, **dict(config or {}), "strategy": "saturate", "seed": seed}
    return search(
        graph, knobs, device=device, rules=rules, verify_cache=verify_cache, saturation=limits
    )
