"""Seeded outputs that a behaviour-preserving change must leave byte-identical.

A refactor says "behaviour unchanged"; this script is how it shows it. It writes, as sorted JSON,
every seeded search strategy's Pareto set (costs, objectives, the rewrites that made each graph,
its check level) on two zoo models, with and without knobs and priors, and a seeded 8-trial
rewrite study's trials and exported priors document (modeled objectives: nothing timed). Run it
before and after the change and compare the files::

    python -m benchmarks.seeded_outputs /tmp/before.json    # on the old commit
    python -m benchmarks.seeded_outputs /tmp/after.json     # on the new one
    cmp /tmp/before.json /tmp/after.json                     # silent: byte-identical

About 20 s on 2 cores. Wall-clock budgeted runs (`bench_search`) and measured latencies are not
seeded outputs and are left out. A change that moves a name imported here edits the imports only.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

MODELS = ("gpt2", "bert")
STEPS = 60


def _result(res: Any) -> dict[str, Any]:
    """What a search returns that a seed fixes (no wall times)."""
    return {
        "input_cost": res.input_cost,
        "objectives": list(res.objectives),
        "pareto": [
            {
                "cost": s.cost,
                "objectives": list(s.objectives),
                "steps": [[st.rule, repr(st.site)] for st in s.steps],
                "checked": s.checked,
            }
            for s in res.pareto
        ],
        "rule_names": list(res.rule_names),
        "priors": {k: float(v) for k, v in dict(res.priors).items()},
        "config": res.config,
    }


def searches() -> dict[str, Any]:
    """Every strategy on every model at two seeds, then knobs, priors and saturation."""
    from rewrite import SearchConfig, search, zoo

    out: dict[str, Any] = {}
    for model in MODELS:
        graph = zoo.build(model)
        for strategy in ("stochastic", "greedy", "best_first"):
            for seed in (0, 1):
                cfg = SearchConfig(max_steps=STEPS, seed=seed, strategy=strategy)
                out[f"{model}/{strategy}/{seed}"] = _result(search(graph, cfg, verify_cache=None))
        knobs = {"max_steps": STEPS, "seed": 3, "beta": 0.5}
        out[f"{model}/knobs"] = _result(search(graph, knobs, verify_cache=None))
        fired = sorted({step[0] for r in out.values() for s in r["pareto"] for step in s["steps"]})
        priors = {rule: 2.0 + i for i, rule in enumerate(fired[:3])}
        out[f"{model}/priors"] = _result(
            search(graph, {"max_steps": STEPS, "seed": 2}, priors=priors, verify_cache=None)
        )
        saturate = {"max_steps": STEPS, "seed": 0, "strategy": "saturate"}
        out[f"{model}/saturate"] = _result(search(graph, saturate, verify_cache=None))
    return out


def study() -> dict[str, Any]:
    """A seeded 8-trial rewrite study on modeled costs and the priors document it exports."""
    from rewrite_tuner import rewrite_study
    from rewrite_tuner.export import export_priors
    from rewrite_tuner.study import unmodeled_metrics

    machine = set(unmodeled_metrics())
    with tempfile.TemporaryDirectory() as tmp:
        st = rewrite_study(
            ["gpt2", "bert"], budget=40, name="golden", storage=f"sqlite:///{tmp}/g.db", seed=0,
            seeds=1, calibration_seeds=2,
        )  # fmt: skip
        st.optimize(n_trials=8)
        trials = [
            {
                "number": t.number,
                "config": t.config,
                "values": t.values,
                "state": str(t.state),
                "metrics": {
                    k: v
                    for k, v in (t.metrics or {}).items()
                    if k not in machine and "time" not in k and "second" not in k
                },
            }
            for t in st.trials
        ]
        path = Path(tmp) / "p.json"
        export_priors(st, path, force=True)
        doc = json.loads(path.read_text())
        doc.pop("provenance", None)  # names the database file and the date
        return {"trials": trials, "export": doc}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.seeded_outputs OUT.json")
    warnings.filterwarnings("ignore")
    out = {"searches": searches(), "study": study()}
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True, default=repr))
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
