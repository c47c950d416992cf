"""A small synthetic study that looks like rule-prior tuning (for the demo, notebook and tests).

`toy_space` has a search knob, a population size and a 4-rule Simplex of firing priors;
`toy_evaluate` maps them to two conflicting objectives in a few microseconds:

- ``latency`` (minimize): best with the priors near ``TARGET``, a large population and
  ``tau`` near 1;
- ``search_seconds`` (minimize): grows with the population and with the share of the expensive
  ``shard`` rule.

It also reports a tracking metric ``steps``. Both functions are module-level so worker processes
(process pools, Dask) can import them.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["PARTS", "TARGET", "toy_space", "toy_evaluate", "toy_study"]

PARTS = ("fuse", "merge", "shard", "reorder")
TARGET = {"fuse": 0.4, "merge": 0.3, "shard": 0.2, "reorder": 0.1}


def toy_space() -> Any:
    """The `spaces.Space` of the toy study (3 parameters, 6 unit-cube columns)."""
    from spaces import Float, Int, Simplex, Space

    return Space(
        {
            "tau": Float(0.01, 10.0, log=True),
            "population": Int(4, 64, log=True),
            "priors": Simplex(PARTS),
        }
    )


def toy_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """Objectives ``latency`` and ``search_seconds`` plus the metric ``steps`` of a config."""
    p = config["priors"]
    miss = sum((p[r] - TARGET[r]) ** 2 for r in PARTS)
    pop = float(config["population"])
    latency = (
        1.0 / (1.0 + math.log2(pop) / 6.0) + 2.0 * miss + 0.05 * math.log10(config["tau"]) ** 2
    )
    seconds = 0.1 * pop * (1.0 + 2.0 * p["shard"])
    return {"latency": latency, "search_seconds": seconds, "steps": 100.0 * pop}


def toy_study(name: str = "toy", storage: str = "sqlite:///study.db", **kwargs: Any) -> Any:
    """A `studies.Study` on the toy problem (extra keyword arguments go to `Study`)."""
    from studies.study import Study

    return Study(
        name,
        toy_space(),
        {"latency": "minimize", "search_seconds": "minimize"},
        toy_evaluate,
        storage=storage,
        **kwargs,
    )
