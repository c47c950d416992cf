"""`optimize(fn, inputs)`: an array program rewritten by the verified search, handed back compiled.

The program is imported (`rewrite.arrays.import_program`), searched on the cost model of
Inductor's compiled mode on its device (`rewrite.pytorch.default_profile(compiled=True)`: a
measured profile of this machine when one ships), and the graph with the lowest predicted
latency becomes a module (`rewrite.to_module`, checked against the program on its inputs) that
``torch.compile`` compiles. With ``measure`` (the default) the compiled rewritten program is timed
against the program as written under ``torch.compile``, interleaved on the example inputs, and
kept only when faster beyond noise (the 95% interval of the paired ratios above 1), as the
``rewrite`` backend does; otherwise, and when the search finds no faster graph, the program as
written goes back, compiled. Either way the caller gets a `RewrittenProgram`: a callable with the
program's signature and return value, and the record of what was done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.arrays.program import import_program
from rewrite.errors import ArrayProgramError
from rewrite.ir import Graph
from rewrite.stats import Interval

__all__ = ["RewrittenProgram", "optimize"]

#: Seconds of calls in one timed sample when measuring (microsecond programs run many calls).
SAMPLE_SECONDS = 0.004


@dataclass
class RewrittenProgram:
    """An array program after `optimize`: call it like the program.

    Attributes:
        name: The program's name.
        fn: The compiled callable (the rewritten program, or the program as written).
        rewritten: Whether ``fn`` runs the rewritten graph.
        graph: The graph ``fn`` runs (the input graph when not rewritten).
        input_graph: The imported program.
        rules: Rule name -> times applied to reach ``graph``.
        proofs: Rule name -> its z3 verdict in the verified catalogue (``"proved"`` for every
            rule of the catalogue; ``"not in the catalogue"`` for a rule passed by hand).
        predicted_speedup: Cost-model latency of the input graph over the chosen graph's.
        measured_speedup: Measured compiled speedup on the example inputs with its 95%
            interval (None when not measured).
        reason: Why ``fn`` is what it is, in one sentence.
        seconds: Seconds per phase (``import``, ``search``, ``build``, ``compile``,
            ``measure``).
        module: The exported module calling the program (kept alive for checks).
    """

    name: str
    fn: Callable[..., Any]
    rewritten: bool
    graph: Graph
    input_graph: Graph
    rules: dict[str, int]
    proofs: dict[str, str]
    predicted_speedup: float
    measured_speedup: Interval | None
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)
    module: Any = field(default=None, repr=False)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able record (without the callable and graphs)."""
        return {
            "name": self.name,
            "rewritten": self.rewritten,
            "rules": dict(self.rules),
            "proofs": dict(self.proofs),
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup.to_dict() if self.measured_speedup else None,
            "reason": self.reason,
            "nodes": [len(self.input_graph), len(self.graph)],
            "seconds": dict(self.seconds),
        }


def optimize(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    name: str | None = None,
    config: Mapping[str, Any] | Any = None,
    priors: Any = None,
    profile: Any = None,
    measure: bool = True,
    repeats: int = 15,
    memory_ratio: float = 1.5,
    seed: int = 0,
) -> RewrittenProgram:
    """Rewrite an array program and hand it back compiled (see the module docstring).

    Args:
        fn: The program: a function of ``torch.Tensor``s written with `rewrite.arrays.jnp`
            (e.g. `rewrite.arrays.load_program(path).fn`).
        inputs: Example inputs, one tensor per argument; they fix the shapes the handed-back
            callable is compiled for.
        name: The program's name (default: the function's).
        config: A `rewrite.SearchConfig` or a dict of its knobs (default: the deployment
            search's, `rewrite.pytorch.optimize.DEPLOY_STEPS` steps, seed 0).
        priors: Rule priors of the search (a `RulePriors`, a dict, a priors file, None).
        profile: The cost-model profile (default: `rewrite.pytorch.default_profile` of the
            inputs' device in compiled mode).
        measure: Time the compiled rewritten program against the program as written and keep
            the faster beyond noise.
        repeats: Timed samples of each when measuring (each runs many calls:
            `SAMPLE_SECONDS`).
        memory_ratio: Most predicted peak memory of the chosen graph, as a multiple of the
            program's.
        seed: Seed of the check inputs and of the intervals.

    Returns:
        The `RewrittenProgram`.

    Raises:
        ArrayProgramError: If the program cannot be imported (naming the construct), or on bad
            arguments.
        ModuleMismatchError: If the rewritten program's outputs differ from the program's on the
            inputs (a bug: every rule is proven).
    """
    import torch

    from rewrite.pytorch.optimize import default_profile, deploy_search, graph_rules

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 3:
        raise ArrayProgramError(f"repeats must be an int >= 3, but got {repeats!r}.")
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    graph, module = import_program(fn, inputs, name)
    name = graph.name
    seconds["import"] = time.perf_counter() - t
    t = time.perf_counter()
    device = inputs[0].device if inputs else torch.device("cpu")
    profile = profile or default_profile(device, compiled=True)
    result, base = deploy_search(graph, config, priors, profile, memory_ratio)
    seconds["search"] = time.perf_counter() - t
    original = torch.compile(fn, dynamic=False)
    pick = _fastest_predicted(result, graph, profile, base, memory_ratio)
    if pick is None:
        return RewrittenProgram(
            name, original, False, graph, graph, {}, {}, 1.0, None,
            "kept as written: the search found no graph predicted faster", seconds, module,
        )  # fmt: skip
    t = time.perf_counter()
    from rewrite.pytorch.module import to_module

    chosen = result.pareto[pick]
    gm = to_module(chosen.graph, module, origin=graph, inputs=list(inputs), seed=seed)
    plain = as_function(gm, name)
    seconds["build"] = time.perf_counter() - t
    rules = graph_rules(result, pick, base)
    lat = chosen.cost["latency"]
    predicted = base["cost"]["latency"] / lat if lat > 0 else 1.0  # 0 s: no kernel either way
    rewritten = torch.compile(plain, dynamic=False)
    prog = RewrittenProgram(
        name, rewritten, True, chosen.graph, graph, rules, _proofs(rules), predicted, None,
        f"rewritten: predicted {predicted:.3g}x (not measured)", seconds, module,
    )  # fmt: skip
    if measure:
        _keep_faster(prog, original, inputs, repeats, seed)
    return prog


#: Cost entries ranking the graphs, first to last: a graph of equal predicted latency that does
#: less work (a kernel-free graph, a dropped copy, which Inductor's cost profile prices at 0 s) is
#: still taken.
_RANK = ("latency", "flops", "kernels", "bytes", "peak_memory")


def as_function(gm: Any, name: str) -> Callable[..., Any]:
    """The code of a `rewrite.to_module` module as a plain function of its inputs.

    ``torch.compile`` of a module guards on the module and flattens its structured outputs on
    every call (tens of microseconds on the programs of `benchmarks/bench_suites.py`); the
    function has the module's computation, arguments and return value (one tensor, or a tuple),
    and reads the module's buffers (multi-element constants) from it.
    """
    import torch.fx

    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out[0] if isinstance(out, tuple | list) and len(out) == 1 else out)
    code = graph.python_code("self")
    scope = dict(code.globals)
    exec(compile(code.src, f"<rewritten {name}>", "exec"), scope)
    forward = scope["forward"]

    def rewritten(*args: Any) -> Any:
        return forward(gm, *args)

    rewritten.__name__ = rewritten.__qualname__ = f"{name}_rewritten"
    return rewritten


def _fastest_predicted(
    result: Any, graph: Graph, profile: Any, base: Mapping[str, Any], memory_ratio: float
) -> int | None:
    """The Pareto graph ranked first by `_RANK`, if it ranks before the input graph and keeps
    its peak memory within ``memory_ratio`` of the input's."""
    from rewrite.cost import cost

    c = cost(graph, profile).as_dict()
    mem = base["cost"]["peak_memory"] * memory_ratio
    key = lambda d: tuple(d[k] for k in _RANK)  # noqa: E731
    ok = [
        i
        for i, s in enumerate(result.pareto)
        if key(s.cost) < key(c)
        and s.cost["latency"] <= c["latency"]
        and s.cost["peak_memory"] <= mem
    ]
    return min(ok, key=lambda i: key(result.pareto[i].cost)) if ok else None


def _proofs(rules: Mapping[str, int]) -> dict[str, str]:
    from rewrite.rules import default_registry

    reports = default_registry().reports
    return {r: reports[r].proof.verdict if r in reports else "not in the catalogue" for r in rules}


def _keep_faster(
    prog: RewrittenProgram,
    original: Callable[..., Any],
    inputs: Sequence[Any],
    repeats: int,
    seed: int,
) -> None:
    """Time both compiled programs, interleaved; fall back to the original unless the rewritten
    one is faster beyond noise."""
    from rewrite.measure.timing import time_callables
    from rewrite.stats import paired_ratio_interval

    t = time.perf_counter()
    rewritten = prog.fn
    rewritten(*inputs), original(*inputs)  # compile both before timing
    prog.seconds["compile"] = time.perf_counter() - t
    t = time.perf_counter()
    calls = calls_per_sample(original, inputs)
    fns = {
        "original": lambda: [original(*inputs) for _ in range(calls)],
        "rewritten": lambda: [rewritten(*inputs) for _ in range(calls)],
    }
    timed = time_callables(fns, inputs[0].device if inputs else None, repeats=repeats, seed=seed)
    ratio = paired_ratio_interval(timed["original"].times, timed["rewritten"].times, seed)
    prog.seconds["measure"] = time.perf_counter() - t
    prog.measured_speedup = ratio
    if ratio.low > 1.0:
        prog.reason = f"rewritten: {ratio}x measured, predicted {prog.predicted_speedup:.3g}x"
        return
    prog.fn, prog.rewritten = original, False
    prog.reason = (
        f"kept as written: the rewritten program measured {ratio}x, not faster beyond noise "
        f"(predicted {prog.predicted_speedup:.3g}x)"
    )


def calls_per_sample(fn: Callable[..., Any], inputs: Sequence[Any]) -> int:
    """Calls of ``fn`` filling about `SAMPLE_SECONDS` (at least 1, at most 10,000)."""
    t = time.perf_counter()
    fn(*inputs)
    one = max(time.perf_counter() - t, 1e-7)
    return int(min(max(SAMPLE_SECONDS / one, 1), 10_000))
