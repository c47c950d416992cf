"""What the ``rewrite`` backend (`rewrite.pytorch.dynamo`) chose for a captured graph on a
profile, and its on-disk cache (``$REWRITE_CACHE_DIR/compile``, see
`rewrite.verify.default_cache_dir`): a record per captured graph's hash and everything the choice
depends on (the priors, the search config with its time budget, the memory ratio and the
profile's contents), so compiling the same model again skips the search.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewrite.errors import RewriteError

if TYPE_CHECKING:
    from rewrite.pytorch.dynamo import BackendOptions

__all__ = ["CACHE_VERSION", "Choice", "choose"]

logger = logging.getLogger("rewrite.pytorch.dynamo")  # the backend's one logger

#: Version of the cached records; bump when the choice a record stores would change meaning.
CACHE_VERSION = 3  # 2: deployment searches start from the prefolded graph; 3: profile contents


@dataclass(frozen=True)
class Choice:
    """The graph the search chose on one profile."""

    graph: Any
    rules: dict[str, int]
    predicted_speedup: float
    reason: str
    cached: bool


def choose(graph: Any, opts: BackendOptions, profile: Any) -> Choice:
    """The search's choice for ``graph`` on ``profile`` (from the disk cache when there)."""
    from rewrite.pytorch.optimize import _shortlist, deploy_config, deploy_search, graph_rules
    from rewrite.serialize import from_json, to_json, write_text_atomic

    config = {"time_budget": opts.time_budget, **deploy_config(opts.config)}
    path = _cache_dir() / f"{_cache_key(graph, opts, profile, config)}.json"
    if opts.cache and path.exists():
        try:
            rec = json.loads(path.read_text())
            return Choice(
                from_json(rec["graph"]),
                rec["rules"],
                rec["predicted_speedup"],
                rec["reason"],
                cached=True,
            )
        except (OSError, ValueError, KeyError, RewriteError):
            logger.warning("rewrite backend: ignoring an unreadable cache record %s", path)
    result, base = deploy_search(graph, config, opts.priors, profile, opts.memory_ratio)
    picks = _shortlist(result, 1, opts.memory_ratio, base)
    name = str(getattr(profile, "name", profile))
    if picks:
        best = result.pareto[picks[0]]
        speedup = base["cost"]["latency"] / best.cost["latency"]
        choice = Choice(
            best.graph,
            graph_rules(result, picks[0], base),
            speedup,
            f"Pareto graph #{picks[0]} on {name}, predicted {speedup:.3f}x",
            cached=False,
        )
    else:
        choice = Choice(graph, {}, 1.0, f"no graph predicted faster on {name}", cached=False)
    if opts.cache:
        rec = {
            "format_version": CACHE_VERSION,
            "reason": choice.reason,
            "rules": choice.rules,
            "predicted_speedup": choice.predicted_speedup,
            "graph": to_json(choice.graph),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(rec))
        except OSError as e:
            logger.warning("rewrite backend: could not write the cache record %s: %s", path, e)
    return choice


def _cache_dir() -> Path:
    from rewrite.verify.cache import default_cache_dir

    return default_cache_dir() / "compile"


def _cache_key(graph: Any, opts: BackendOptions, profile: Any, config: Mapping[str, Any]) -> str:
    """The cache record's name: everything the choice depends on (the graph, the priors, the
    search config with its time budget, the memory ratio, and the profile's contents)."""
    from rewrite.devices import load_device
    from rewrite.optimize.priors import PriorsFile

    parts = {
        "version": CACHE_VERSION,
        "graph": graph.hash,
        "priors": PriorsFile.of(opts.priors).to_dict(),  # a file's knobs and provenance too
        "config": {k: config[k] for k in sorted(config)},  # the time budget included
        "memory_ratio": opts.memory_ratio,
        "profile": load_device(profile).to_dict(),  # contents, not the name
    }
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=repr).encode(), digest_size=16
    ).hexdigest()
