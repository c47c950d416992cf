"""How space_v1.json and structure_v1.json were made (Space and Structure format_version 1). Do
not re-run to "fix" a failing golden test: the files are frozen; a new format version gets its own
golden file next to these.

    PYTHONPATH=. .venv/bin/python tests/data/golden/make_golden_v1.py
"""

from __future__ import annotations

import json
from pathlib import Path

from spaces import Bool, Choice, Fixed, Float, Int, Simplex, Space
from structure import Edge, Formula, Structure

HERE = Path(__file__).resolve().parent


def golden_space() -> Space:
    """Every parameter kind, with defaults, log scales and a constrained simplex."""
    return Space(
        {
            "population": Int(8, 256, log=True, default=32),
            "mutations": Int(1, 8),
            "tau": Float(0.01, 10.0, log=True, default=1.0),
            "beta": Float(0.0, 1.0),
            "selection": Choice(("softmax", "tournament"), default="tournament"),
            "restart": Bool(default=False),
            "device": Fixed("h100"),
            "suite": Fixed({"workloads": ["gpt2", "bert"], "seeds": [0, 1]}),
            "priors": Simplex(("fuse", "merge", "shard", "algebra")),
        }
    )


def golden_structure() -> Structure:
    """Parameters -> metrics -> objectives with every edge origin, a formula and transforms."""
    return Structure(
        params=("tau", "population", "priors"),
        metrics=("steps", "checks", "applied"),
        objectives=("latency", "effort"),
        edges=(
            Edge("tau", "steps", 0.9),
            Edge("population", "checks", 0.75),
            Edge("priors", "applied", 0.6),
            Edge("applied", "latency", 0.8),
            Edge("steps", "effort", 1.0, "required"),
            Edge("checks", "effort", 1.0, "required"),
            Edge("tau", "latency", 0.0, "direct"),
        ),
        formulas=(Formula("effort", ("steps", "checks"), "sum", (1.0, 0.5)),),
        transforms={"steps": "log1p", "checks": "log1p", "latency": "identity"},
        n_trials=40,
    )


def main() -> None:
    for name, obj in (("space_v1", golden_space()), ("structure_v1", golden_structure())):
        (HERE / f"{name}.json").write_text(json.dumps(obj.to_dict(), indent=1) + "\n")


if __name__ == "__main__":
    main()
