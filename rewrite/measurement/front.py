"""Predicted against measured speedups of a search's Pareto graphs.

`measure_front(result)` re-times the input graph and every Pareto graph of a `SearchResult` on a
real device (`rewrite.measurement.measure`) and pairs each graph's predicted speedup (input latency
over its latency, both from the search's cost model) with the measured one. A graph holding
collectives (a plan for a mesh of several devices) runs every device's piece on the one device,
so its measured speedup is that of the whole plan run serially; its row says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rewrite.ops.collective import COLLECTIVES

__all__ = ["MeasuredSolution", "format_front", "measure_front"]


@dataclass(frozen=True)
class MeasuredSolution:
    """One graph of a measured front (index -1: the input graph).

    Attributes:
        index: Position in `SearchResult.pareto` (-1 for the input graph).
        hash: The graph's hash.
        rewrites: Rewrites from the input.
        predicted_latency: Cost-model seconds.
        measured_latency: Measured median seconds.
        interval: 95% interval of the measured median.
        predicted_speedup: Input predicted latency over this graph's.
        measured_speedup: Input measured latency over this graph's.
        collectives: Whether the graph holds collectives (a multi-device plan, run serially).
    """

    index: int
    hash: str
    rewrites: int
    predicted_latency: float
    measured_latency: float
    interval: tuple[float, float]
    predicted_speedup: float
    measured_speedup: float
    collectives: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = asdict(self)
        d["interval"] = list(self.interval)
        return d


def measure_front(
    result: Any,
    device: Any = None,
    *,
    repeats: int = 10,
    warmup: int = 2,
    seed: int = 0,
    compile: bool = False,
) -> list[MeasuredSolution]:
    """Measure the input graph and every Pareto graph of ``result`` (a `SearchResult`).

    Args:
        result: The search result.
        device: A torch device; None: CUDA when present, else the CPU.
        repeats: Timed runs per graph.
        warmup: Untimed runs first.
        seed: Seed of the random inputs and weights (the same for every graph).
        compile: Time the graphs compiled whole by ``torch.compile`` (Inductor; see
            `rewrite.measurement.measure`): the speedups a compiler's user sees. A compilation costs
            seconds, so only the input and the Pareto graph of the lowest predicted latency
            (the one `SearchResult.measured_ratio` reads) are measured.

    Returns:
        The input graph's row first, then one row per measured Pareto graph in
        `SearchResult.pareto` order.
    """
    from rewrite.measurement.timing import measure

    graphs = [(-1, result.input_graph, result.input_cost["latency"], 0)]
    graphs += [(i, s.graph, s.cost["latency"], len(s.steps)) for i, s in enumerate(result.pareto)]
    if compile and len(graphs) > 2:  # a compilation costs seconds: the input and the fastest
        j = result.objectives.index("latency") if "latency" in result.objectives else 0
        best = min(range(len(result.pareto)), key=lambda i: result.pareto[i].objectives[j])
        graphs = [graphs[0], graphs[best + 1]]
    rows: list[MeasuredSolution] = []
    base_pred = base_meas = 0.0
    for i, g, pred, n in graphs:
        m = measure(g, device, repeats=repeats, warmup=warmup, seed=seed, compile=compile)
        if i == -1:
            base_pred, base_meas = pred, m.latency
        rows.append(
            MeasuredSolution(
                index=i,
                hash=g.hash,
                rewrites=n,
                predicted_latency=float(pred),
                measured_latency=m.latency,
                interval=m.interval,
                predicted_speedup=base_pred / pred if pred else float("nan"),
                measured_speedup=base_meas / m.latency,
                collectives=any(node.op in COLLECTIVES for node in g),
            )
        )
    return rows


def format_front(rows: list[MeasuredSolution]) -> str:
    """A plain-text table of ``rows``: predicted and measured latency and speedup side by side."""
    lines = [
        f"{'graph':>6} {'rewrites':>8} {'pred ms':>9} {'meas ms':>9} {'pred x':>7} {'meas x':>7}"
    ]
    for r in rows:
        name = "input" if r.index < 0 else f"#{r.index}"
        note = "  (multi-device plan, run serially)" if r.collectives else ""
        lines.append(
            f"{name:>6} {r.rewrites:>8} {r.predicted_latency * 1e3:>9.4f} "
            f"{r.measured_latency * 1e3:>9.4f} {r.predicted_speedup:>7.3f} "
            f"{r.measured_speedup:>7.3f}{note}"
        )
    return "\n".join(lines)
