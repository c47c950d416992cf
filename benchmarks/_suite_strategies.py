"""Search strategies side by side on Tensat's graphs and the zoo: cost, time to a cost, latency.

For each graph (the seven TASO/Tensat graphs at their papers' shapes, `rewrite.zoo_tensat`, and
the zoo's six small models, four tuned on and two held out by ``tuner demo``), five strategies
search with the same rules (the verified catalogue), the same cost model (the H100 profile,
objectives latency and peak memory) and the same wall-time budget:

* ``stochastic``: the Pareto search with the default (uniform) priors, several seeds;
* ``tuned``: the same with the tuned priors and knobs ``tuner demo`` exports (``--priors``);
* ``greedy`` and ``best_first``: the one-engine baselines;
* ``saturate``: equality saturation in an egglog e-graph, extracted greedy and by ILP
  (`rewrite.optimize.saturate`; it stops early when the e-graph saturates).

Reported per graph and strategy: the cost-model latency reduction within the budget (median
and range over seeds), the search time at which the strategy first reached saturation's
extracted latency (None: not within the budget), and, for the distinct final graphs, the latency
measured under Inductor on this CPU (``torch.compile`` of the graph handed back as a module,
timed interleaved with the input graph; the ratio's 95% interval over paired rounds).

Tensat's published reductions (NasRNN 68.9%, SqueezeNet 24.5%; TASO 45.4% and 6.7%) come from
TASO's GPU cost model and TASO's rules; the figures here use this project's rules and cost
model, so they are not comparable to the paper's: only the strategies are compared, on one
footing.

`compare` returns the rows; `run` (options from `add_arguments`) saves them after each graph as
the ``strategies`` run of ``benchmarks/results/bench_suites.json`` and prints the table. It is
the second part of ``python -m benchmarks.bench_suites --part strategies`` and runs alone as
``python -m benchmarks._suite_strategies [--quick] [--seeds 3] [--budget 20] [--zoo-budget 10]
[--priors benchmarks/data/demo-priors.json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks._common import compact_json, machine_info, round_floats, write_results
from rewrite.ir import Graph
from rewrite.optimize.engine import Context, Engine
from rewrite.optimize.priors import PriorsFile, RulePriors, read_priors_file
from rewrite.optimize.runner import build_result, default_rules, make_verifier, stop_reason
from rewrite.optimize.strategies import step_strategy

STRATEGIES = ("stochastic", "tuned", "greedy", "best_first", "saturate")
DEVICE = "h100"
OBJECTIVES = ("latency", "peak_memory")
# Tensat's paper (Yang et al., MLSys 2021, arXiv 2101.01332), its table of TASO against Tensat:
# search seconds and runtime speedup percentage of the optimized graph, from TASO's measured
# per-op GPU costs (as reproduced on mwillsey.com/papers/tensat).
PUBLISHED = {
    g: dict(zip(("taso_search_s", "tensat_search_s", "taso_speedup", "tensat_speedup"), v))
    for g, v in {
        "bert": (13.6, 1.4, 8.5, 9.2),
        "resnext50": (25.3, 0.7, 5.5, 8.8),
        "nasneta": (1226.0, 10.6, 1.9, 7.3),
        "nasrnn": (177.3, 0.5, 45.4, 68.9),
        "inceptionv3": (68.6, 5.1, 6.3, 10.0),
        "squeezenet": (16.4, 0.3, 6.7, 24.5),
        "vgg19": (8.9, 0.4, 8.9, 8.9),
    }.items()
}
PRIORS = os.path.relpath(os.path.join(os.path.dirname(__file__), "data", "demo-priors.json"))
PROVENANCE = ("study", "trial", "values", "date", "pick", "beats_defaults")


def graphs(quick: bool) -> list[tuple[str, str, Any]]:
    """``(suite, name, ZooModel factory)`` of every graph: Tensat's at full size (small when
    ``quick``), the zoo's small models."""
    from rewrite import zoo, zoo_tensat

    size = "small" if quick else "full"
    out: list[tuple[str, str, Any]] = []
    for n in zoo_tensat.names():
        out.append(("tensat", n, lambda dev, n=n: zoo_tensat.model(n, size, device=dev)))
    for n in zoo.names():
        out.append(("zoo", n, lambda dev, n=n: zoo.model(n, device=dev)))
    return out


def _config(strategy: str, seed: int, budget: float, priors: PriorsFile | None) -> dict:
    knobs: dict[str, Any] = {}
    if strategy == "tuned" and priors is not None:
        knobs.update(priors.search_config)
    knobs.update(
        strategy="stochastic" if strategy == "tuned" else strategy,
        seed=seed,
        time_budget=budget,
        max_steps=10**12,
        epsilon=0.0,
        objectives=OBJECTIVES,
    )
    return knobs


def traced_search(
    graph: Graph, strategy: str, seed: int, budget: float, priors: PriorsFile | None
) -> dict[str, Any]:
    """One search with a wall-time budget; ``trace`` is ``(seconds, best latency)`` at every
    improvement of the best latency (the stochastic and baseline strategies are stepped here so
    the time of each improvement is seen; saturation reports the time its extraction ended)."""
    from rewrite.optimize.config import SearchConfig

    tmp = tempfile.TemporaryDirectory()  # a cold verdict cache: each run pays its own checks
    cache = os.path.join(tmp.name, "verdicts.sqlite")
    t0 = time.perf_counter()
    knobs = _config(strategy, seed, budget, priors)
    if strategy == "saturate":
        from rewrite.optimize.saturate import saturate

        knobs.pop("strategy")
        knobs.pop("seed")
        res = saturate(graph, device=DEVICE, seed=seed, config=knobs, verify_cache=cache)
        best = res.best("latency").cost["latency"]
        done = res.strategy_info["seconds_to_extracted"]
        trace = [(0.0, res.input_cost["latency"]), (done, best)]
        info = {k: res.strategy_info[k] for k in ("e_nodes", "iterations", "stop", "ilp")}
    else:
        cfg = SearchConfig.from_dict(knobs)
        rules = default_rules(cfg.max_fusion_size)
        names = [r.name for r in rules]
        tuned = priors.priors if strategy == "tuned" and priors is not None else {}
        weights = RulePriors(tuned) if tuned else RulePriors.uniform(names)
        prior = weights.resolve(names)
        ctx = Context(graph, rules, prior / prior.sum(), cfg, DEVICE, make_verifier(seed, cache))
        engine = Engine(ctx, np.random.SeedSequence(seed), step_strategy(cfg.strategy))
        j = OBJECTIVES.index("latency")
        trace = [(0.0, ctx.input_costs["latency"])]
        while (reason := stop_reason(engine, cfg, t0, engine.steps)) is None:
            if engine.step():
                best = min(e.y[j] for e in engine.frontier)
                if best < trace[-1][1]:
                    trace.append((time.perf_counter() - t0, float(best)))
        res = build_result(
            ctx, engine.frontier, engine.hv_trace, engine.stats, reason, t0, 1,
            len(engine.population),
        )  # fmt: skip
        info = {"steps": res.stats.steps, "stop": reason}
    sol = res.best("latency")
    tmp.cleanup()
    return {
        "strategy": strategy,
        "seed": seed,
        "reduction": 1.0 - sol.cost["latency"] / res.input_cost["latency"],
        "latency": sol.cost["latency"],
        "trace": trace,
        "wall": res.wall_time,
        "graph": sol.graph,
        "checked": sol.checked,
        **info,
    }


def time_to(trace: Sequence[tuple[float, float]], target: float) -> float | None:
    """First time in ``trace`` at which the best latency is at most ``target``."""
    for t, v in trace:
        if v <= target * (1 + 1e-9):
            return t
    return None


def measure_latency(
    model: Any, finals: dict[str, Graph], repeats: int, threads: int
) -> dict[str, dict[str, Any]]:
    """Inductor latency of each distinct final graph against the input graph (``"input"``),
    timed interleaved on the CPU: median seconds, and the paired ratio to the input with its
    95% interval."""
    import torch

    from rewrite.lowering.module import to_module
    from rewrite.measurement import time_callables
    from rewrite.stats import paired_ratio_interval

    torch.set_num_threads(threads)
    by_hash: dict[str, str] = {}
    fns = {}
    for label, g in finals.items():
        if g.hash in by_hash:
            continue
        by_hash[g.hash] = label
        mod = torch.compile(to_module(g, model.module, inputs=list(model.args)))
        fns[label] = lambda m=mod: m(*model.args)
    times = time_callables(fns, "cpu", repeats=repeats, warmup=2)
    base = times["input"].times
    out = {}
    for label, g in finals.items():
        m = times[by_hash[g.hash]]
        iv = paired_ratio_interval(m.times, base)
        out[label] = {"median_s": m.latency, "ratio": iv.value, "ci": [iv.low, iv.high],
                      "same_as": by_hash[g.hash]}  # fmt: skip
    torch._dynamo.reset()
    return out


def _summary(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    red = [r["reduction"] for r in runs]
    reach = [time_to(r["trace"], target) for r in runs]
    got = [t for t in reach if t is not None]
    return {
        "reduction": statistics.median(red),
        "reduction_range": [min(red), max(red)],
        "time_to_saturation_cost": statistics.median(got) if len(got) == len(runs) else None,
        "reached": f"{len(got)}/{len(runs)}",
        "seeds": len(runs),
    }


def compare(
    *,
    quick: bool = False,
    seeds: int = 3,
    budget: float = 60.0,
    zoo_budget: float = 30.0,
    priors: str | None = None,
    measure: bool = True,
    repeats: int = 10,
    threads: int = 1,
    only: Sequence[str] = (),
    on_row: Any = None,
) -> list[dict[str, Any]]:
    """Run the comparison; one row per graph (see the module docstring).

    Args:
        quick: Tensat's graphs at their small sizes.
        seeds: Seeds of the stochastic strategies (the others are deterministic: seed 0).
        budget: Wall seconds per search on Tensat's graphs (final checks included).
        zoo_budget: Wall seconds per search on the zoo's small models.
        priors: A priors file exported by ``tuner demo`` (None: the ``tuned`` arm is skipped).
        measure: Time the final graphs under Inductor.
        repeats: Timed rounds of the Inductor measurement.
        threads: Torch threads of the measurement.
        only: Graph names to run (default: all).
        on_row: Called with each row as it is done (to save as the run goes).

    Returns:
        The rows.
    """
    pri = read_priors_file(priors) if priors else None
    rows = []
    for suite, name, factory in graphs(quick):
        if only and name not in only:
            continue
        b = budget if suite == "tensat" else zoo_budget
        rows.append(_one_graph(suite, name, factory, pri, seeds, b, measure, repeats, threads))
        if on_row is not None:
            on_row(rows[-1])
    return rows


def _one_graph(
    suite: str, name: str, factory: Any, pri: PriorsFile | None, seeds: int, budget: float,
    measure: bool, repeats: int, threads: int,
) -> dict[str, Any]:  # fmt: skip
    t0 = time.perf_counter()
    graph = factory("meta" if suite == "tensat" else "cpu").to_graph()
    row: dict[str, Any] = {"suite": suite, "graph": name, "nodes": len(graph), "budget_s": budget,
                           "load_average": list(os.getloadavg())}  # fmt: skip
    print(f"\n{suite}/{name}: {len(graph)} nodes ({time.perf_counter() - t0:.0f} s)", flush=True)
    sat = traced_search(graph, "saturate", 0, budget, pri)
    _log(sat)
    runs: dict[str, list[dict[str, Any]]] = {"saturate": [sat]}
    for strategy in ("greedy", "best_first"):
        runs[strategy] = [traced_search(graph, strategy, 0, budget, pri)]
        _log(runs[strategy][0])
    for seed in range(seeds):  # the two stochastic arms interleaved, seed by seed
        for strategy in ("stochastic", "tuned") if pri else ("stochastic",):
            runs.setdefault(strategy, []).append(traced_search(graph, strategy, seed, budget, pri))
            _log(runs[strategy][-1])
    target = sat["latency"]
    row["saturation"] = {k: sat[k] for k in ("e_nodes", "iterations", "stop", "ilp", "wall")}
    row["saturation"]["seconds_to_extracted"] = sat["trace"][-1][0]
    row["strategies"] = {s: _summary(r, target) for s, r in runs.items()}
    row["runs"] = [
        {"strategy": s, "seed": x["seed"], "reduction": x["reduction"], "wall": x["wall"],
         "time_to_saturation_cost": time_to(x["trace"], target), "stop": x.get("stop"),
         "checked": x["checked"]}
        for s, rs in runs.items() for x in rs
    ]  # fmt: skip
    if measure:
        finals = {"input": graph} | {s: r[0]["graph"] for s, r in runs.items()}
        del graph
        gc.collect()
        model = factory("cpu")
        row["inductor"] = measure_latency(model, finals, repeats, threads)
        del model
        gc.collect()
    return row


def _log(r: dict[str, Any]) -> None:
    print(
        f"  {r['strategy']:10s} seed {r['seed']} latency -{100 * r['reduction']:.1f}% "
        f"({r['wall']:.1f} s, {r.get('stop')}, checked {r['checked']})",
        flush=True,
    )


def speedup(reduction: float) -> float:
    """A cost reduction as Tensat's speedup percentage: input cost over final cost, minus 1."""
    return 100.0 * (1.0 / (1.0 - reduction) - 1.0)


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table: reduction per strategy, time to saturation's cost, Inductor ratios, and
    saturation's cost-model speedup beside the speedups Tensat's paper reports (`PUBLISHED`)."""
    head = ("| graph | " + " | ".join(STRATEGIES) + " | tuned: s to sat. cost | "
            "Inductor sat./tuned | sat. speedup (paper: TASO / Tensat) |")  # fmt: skip
    lines = [head, "|" + "---|" * (len(STRATEGIES) + 4)]
    for r in rows:
        s = r["strategies"]
        cells = [f"{100 * s[k]['reduction']:.1f}%" if k in s else "-" for k in STRATEGIES]
        tuned = s.get("tuned") or s["stochastic"]
        ttr = tuned["time_to_saturation_cost"]
        sat_s = r["saturation"]["wall"]
        reach = f"{ttr:.1f} vs {sat_s:.1f}" if ttr is not None else f"not in budget vs {sat_s:.1f}"
        ind = r.get("inductor", {})
        arm = "tuned" if "tuned" in ind else "stochastic"
        meas = f"{ind['saturate']['ratio']:.2f} / {ind[arm]['ratio']:.2f}" if ind else "-"
        pub = PUBLISHED.get(r["graph"]) if r.get("suite", "tensat") == "tensat" else None
        paper = f" ({pub['taso_speedup']} / {pub['tensat_speedup']})" if pub else ""
        ours = f"{speedup(s['saturate']['reduction']):.1f}%{paper}" if "saturate" in s else "-"
        lines.append(f"| {r['graph']} | " + " | ".join(cells) + f" | {reach} | {meas} | {ours} |")
    return "\n".join(lines)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return round_floats(row)


def dumps(obj: Any, depth: int = 0) -> str:
    """The record as `compact_json` writes it, but each search of a row's ``runs`` and each
    flat object deep in a row on one line."""

    if not isinstance(obj, dict) or not obj:
        return compact_json(obj, depth) if not isinstance(obj, list) else _list(obj, depth)
    leaf = not any(isinstance(v, dict) or isinstance(v, list) and v and isinstance(v[0], dict)
                   for v in obj.values())  # fmt: skip
    if depth >= 4 and leaf:  # a strategy's summary, an Inductor timing: one line
        return json.dumps(obj, separators=(", ", ": "))
    pad = "  " * (depth + 1)
    items = []
    for k, v in obj.items():
        if k == "runs" and isinstance(v, list) and all(isinstance(x, dict) for x in v):
            lines = f",\n{pad}  ".join(json.dumps(x, separators=(",", ":")) for x in v)
            items.append(f'{pad}"runs": [\n{pad}  {lines}\n{pad}]')
        else:
            items.append(f"{pad}{json.dumps(k)}: {dumps(v, depth + 1)}")
    return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"


def _list(obj: list[Any], depth: int) -> str:
    if not any(isinstance(v, dict) for v in obj):
        return compact_json(obj, depth)
    pad = "  " * (depth + 1)
    return "[\n" + ",\n".join(pad + dumps(v, depth + 1) for v in obj) + "\n" + "  " * depth + "]"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """This part's options (``benchmarks.bench_suites`` adds them to its own parser)."""
    ap.add_argument("--quick", action="store_true", help="Tensat graphs at small sizes")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the stochastic strategies")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per search (Tensat)")
    ap.add_argument("--zoo-budget", type=float, default=30.0, help="seconds per search (zoo)")
    ap.add_argument("--priors", default=PRIORS, help="tuned priors ('' to skip the tuned arm)")
    ap.add_argument("--no-measure", action="store_true", help="skip the Inductor timing")
    ap.add_argument("--repeats", type=int, default=10, help="Inductor timing rounds")
    ap.add_argument("--only", default="", help="comma-separated graph names")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the comparison with parsed options, saving the ``strategies`` run of
    ``benchmarks/results/bench_suites.json`` after every graph; print the table; return the
    record."""
    priors = args.priors or None
    if priors and not os.path.exists(priors):
        raise SystemExit(f"--priors {priors!r} does not exist; `make run` (tuner demo) writes "
                         "one, or pass --priors '' to skip the tuned arm")  # fmt: skip
    machine = machine_info()
    threads = getattr(args, "threads", 1)
    settings = {"quick": args.quick, "seeds": args.seeds, "budget_s": args.budget,
                "zoo_budget_s": args.zoo_budget,
                "device_profile": DEVICE, "objectives": list(OBJECTIVES), "priors": priors,
                "inductor": {"repeats": args.repeats, "threads": threads, "device": "cpu"}}  # fmt: skip
    if priors:  # where the priors come from (their metrics stay in the priors file)
        prov = read_priors_file(priors).provenance
        settings["priors_provenance"] = {k: prov.get(k) for k in PROVENANCE if k in prov}
    record: dict[str, Any] = {"settings": settings, "rows": []}

    def save(row: dict[str, Any]) -> None:
        record["rows"].append(_jsonable(row))
        write_results("bench_suites", record, machine=machine, run="strategies", dumps=dumps)

    only = [s for s in args.only.split(",") if s]
    rows = compare(quick=args.quick, seeds=args.seeds, budget=args.budget,
                   zoo_budget=args.zoo_budget, priors=priors, measure=not args.no_measure,
                   repeats=args.repeats, threads=threads, only=only, on_row=save)  # fmt: skip
    print()
    print(table(rows))
    return record


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
