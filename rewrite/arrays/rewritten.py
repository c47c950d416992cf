"""`optimize(fn, inputs)`: an array program rewritten by the verified search, handed back compiled.

The program is imported (`rewrite.arrays.import_program`) and searched (`ARRAY_SEARCH`) on two
cost models of its device (`PROFILES`, `rewrite.pytorch.default_profile`): Inductor's compiled
mode, which prices generated kernels by their arithmetic (a measured profile of this machine
when one ships), and eager PyTorch, which prices every op as a kernel. The graph each predicts
fastest becomes a module (`rewrite.to_module`, checked against the program on its inputs) and
then a plain function of the program's arguments (`as_function`: ``torch.compile`` of a module
guards on it and flattens its outputs on every call, tens of microseconds on these programs),
compiled by ``torch.compile``. With ``measure`` (the default) each is timed against the program
as written under ``torch.compile``, interleaved on the example inputs, and the fastest is kept
only when faster beyond noise (the 95% interval of its paired ratios above 1), as the
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
from rewrite.lowering.module import to_module
from rewrite.stats import Interval

__all__ = ["ARRAY_SEARCH", "PROFILES", "RewrittenProgram", "optimize"]

#: Seconds of calls in one timed sample when measuring (microsecond programs run many calls).
SAMPLE_SECONDS = 0.01
#: The cost-model modes searched (`rewrite.pytorch.default_profile`): Inductor's compiled mode,
#: which prices generated kernels by their arithmetic, and eager mode, which prices every op as a
#: kernel (an unrolled loop of 200 rows is 200 copies of its kernels there, as under Inductor,
#: which does not fuse a stack of more than 8 computed pieces); measurement picks between them.
PROFILES = ("compiled", "eager")
#: The search's knobs for array programs (their graphs are small; a loop unrolled over 200 rows
#: is about 1,400 nodes, where a step costs tenths of a second).
ARRAY_SEARCH: Mapping[str, Any] = {"max_steps": 300, "time_budget": 60.0}


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
        candidates: The graph each profile's search predicted fastest: its profile, rules,
            predicted and (when measured) measured speedup.
        domains: The promise about the inputs the rewrites may rely on (None: none).
        eager: The same program as ``fn``, not compiled (for comparisons: eager PyTorch runs
            programs of a few microseconds faster than a compiled call's fixed cost).
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
    candidates: list[dict[str, Any]] = field(default_factory=list)
    domains: Any = None
    eager: Callable[..., Any] | None = field(default=None, repr=False)

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
            "candidates": list(self.candidates),
            "domains": self.domains,
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
    repeats: int = 21,
    memory_ratio: float = 1.5,
    seed: int = 0,
    backend: str = "inductor",
    domains: str | Sequence[str | None] | None = None,
) -> RewrittenProgram:
    """Rewrite an array program and hand it back compiled (see the module docstring).

    Args:
        fn: The program: a function of ``torch.Tensor``s written with `rewrite.arrays.jnp`
            (e.g. `rewrite.arrays.load_program(path).fn`).
        inputs: Example inputs, one tensor per argument; they fix the shapes the handed-back
            callable is compiled for.
        name: The program's name (default: the function's).
        config: A `rewrite.SearchConfig` or a dict of its knobs (a dict goes over
            `ARRAY_SEARCH`; a `SearchConfig` is used as given); ``{"strategy": "saturate"}``
            searches by equality saturation (`rewrite.optimize.saturate`) instead.
        priors: Rule priors of the search (a `RulePriors`, a dict, a priors file, None).
        profile: One cost-model profile to search on (default: both of `PROFILES`).
        measure: Time the compiled candidates against the program as written and keep the
            fastest if faster beyond noise; False: take the first profile's graph unmeasured.
        repeats: Timed samples of each when measuring (each runs many calls:
            `SAMPLE_SECONDS`).
        memory_ratio: Most predicted peak memory of a chosen graph, as a multiple of the
            program's.
        seed: Seed of the check inputs and of the intervals.
        backend: The ``torch.compile`` backend of the handed-back callables (the program as
            written and the rewritten ones alike): ``"inductor"``, or e.g. ``"eager"`` (Dynamo's
            capture alone, without code generation: for tests).
        domains: A promise about the inputs' values the rules may rely on (``"positive"``,
            ``"nonnegative"``, or one or None per input; `rewrite.arrays.import_program`): the
            handed-back program is then exact only on inputs that keep it.

    Returns:
        The `RewrittenProgram`.

    Raises:
        ArrayProgramError: If the program cannot be imported (naming the construct), or on bad
            arguments.
        ModuleMismatchError: If a rewritten program's outputs differ from the program's on the
            inputs (a bug: every rule is proven).
    """
    import torch

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 3:
        raise ArrayProgramError(f"repeats must be an int >= 3, but got {repeats!r}.")
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    graph, module = import_program(fn, inputs, name, domains)
    seconds["import"] = time.perf_counter() - t
    t = time.perf_counter()
    device = inputs[0].device if inputs else torch.device("cpu")
    cands = _search(graph, _profiles(profile, device), config, priors, memory_ratio)
    seconds["search"] = time.perf_counter() - t
    original = torch.compile(fn, dynamic=False, backend=backend)
    if not cands:
        return RewrittenProgram(
            graph.name, original, False, graph, graph, {}, {}, 1.0, None,
            "kept as written: the search found no graph predicted faster", seconds, module,
            domains=domains, eager=module.forward,
        )  # fmt: skip
    t = time.perf_counter()
    for c in cands:
        gm = to_module(c.graph, module, origin=graph, inputs=list(inputs), seed=seed)
        c.plain = as_function(gm, graph.name)
        c.fn = torch.compile(c.plain, dynamic=False, backend=backend)
    seconds["build"] = time.perf_counter() - t
    best = cands[0]
    assert best.fn is not None
    prog = RewrittenProgram(
        graph.name, best.fn, True, best.graph, graph, best.rules, _proofs(best.rules),
        best.predicted, None, f"rewritten: predicted {best.predicted:.3g}x on {best.profile} "
        "(not measured)", seconds, module, [c.record() for c in cands],
    )  # fmt: skip
    prog.domains, prog.eager = domains, best.plain
    if measure:
        _keep_fastest(prog, cands, original, inputs, repeats, seed)
    return prog


@dataclass
class _Candidate:
    """The fastest graph the search predicted on one profile."""

    profile: str
    graph: Graph
    rules: dict[str, int]
    predicted: float
    fn: Callable[..., Any] | None = None
    plain: Callable[..., Any] | None = None
    measured: Interval | None = None

    def record(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "rules": dict(self.rules),
            "predicted_speedup": self.predicted,
            "measured_speedup": self.measured.to_dict() if self.measured else None,
        }


def _profiles(profile: Any, device: Any) -> dict[str, Any]:
    from rewrite.pytorch.optimize import default_profile

    if profile is not None:
        return {str(getattr(profile, "name", profile)): profile}
    return {mode: default_profile(device, compiled=mode == "compiled") for mode in PROFILES}


def _search(
    graph: Graph,
    profiles: Mapping[str, Any],
    config: Any,
    priors: Any,
    memory_ratio: float,
) -> list[_Candidate]:
    """The fastest predicted graph of the search on each profile (distinct graphs only)."""
    from rewrite.optimize import SearchConfig
    from rewrite.pytorch.optimize import deploy_search, graph_rules

    cfg = config if isinstance(config, SearchConfig) else {**ARRAY_SEARCH, **dict(config or {})}
    out: list[_Candidate] = []
    for label, prof in profiles.items():
        result, base = deploy_search(graph, cfg, priors, prof, memory_ratio)
        pick = _fastest_predicted(result, graph, prof, base, memory_ratio)
        if pick is None or any(c.graph.hash == result.pareto[pick].graph.hash for c in out):
            continue
        chosen = result.pareto[pick]
        lat = chosen.cost["latency"]
        predicted = base["cost"]["latency"] / lat if lat > 0 else 1.0  # 0 s: no kernel at all
        name = str(getattr(prof, "name", label))
        out.append(_Candidate(name, chosen.graph, graph_rules(result, pick, base), predicted))
    return out


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
    ident = "".join(c if c.isalnum() else "_" for c in name) + "_rewritten"
    # the wrapper is compiled here too: a code object of its own per program, since
    # torch.compile caches (and limits recompilations) per code object
    src = f"{code.src}\n\ndef {ident}(*args):\n    return forward(_module, *args)\n"
    scope = {**code.globals, "_module": gm}
    exec(compile(src, f"<rewritten {name}>", "exec"), scope)
    fn: Callable[..., Any] = scope[ident]
    return fn


def _fastest_predicted(
    result: Any, graph: Graph, profile: Any, base: Mapping[str, Any], memory_ratio: float
) -> int | None:
    """The Pareto graph ranked first by `_RANK`, if it ranks before the input graph and keeps
    its peak memory within ``memory_ratio`` of the input's."""
    from rewrite.costmodel import cost

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


def _keep_fastest(
    prog: RewrittenProgram,
    cands: list[_Candidate],
    original: Callable[..., Any],
    inputs: Sequence[Any],
    repeats: int,
    seed: int,
) -> None:
    """Time the compiled candidates and the program as written, interleaved; keep the fastest
    candidate faster beyond noise, else the program as written."""
    from rewrite.measurement.timing import time_callables
    from rewrite.stats import paired_ratio_interval

    t = time.perf_counter()
    fns = {"original": original} | {str(i): c.fn for i, c in enumerate(cands)}
    for f in fns.values():
        assert f is not None
        f(*inputs)  # compile before timing
    prog.seconds["compile"] = time.perf_counter() - t
    t = time.perf_counter()
    calls = calls_per_sample(original, inputs)
    timed = time_callables(
        {k: _repeated(f, inputs, calls) for k, f in fns.items() if f is not None},
        inputs[0].device if inputs else None,
        repeats=repeats,
        seed=seed,
    )
    for i, c in enumerate(cands):
        c.measured = paired_ratio_interval(timed["original"].times, timed[str(i)].times, seed)
    prog.seconds["measure"] = time.perf_counter() - t
    prog.candidates = [c.record() for c in cands]
    faster = [c for c in cands if c.measured is not None and c.measured.low > 1.0]
    best = max(faster or cands, key=lambda c: c.measured.value if c.measured else 0.0)
    assert best.measured is not None and best.fn is not None
    if faster:
        prog.fn, prog.graph, prog.rules, prog.eager = best.fn, best.graph, best.rules, best.plain
        prog.proofs, prog.predicted_speedup = _proofs(best.rules), best.predicted
        prog.measured_speedup = best.measured
        prog.reason = (
            f"rewritten: {best.measured}x measured, predicted {best.predicted:.3g}x on "
            f"{best.profile}"
        )
        return
    prog.eager = prog.module.forward
    prog.fn, prog.rewritten, prog.graph, prog.rules, prog.proofs = (
        original,
        False,
        prog.input_graph,
        {},
        {},
    )
    prog.predicted_speedup, prog.measured_speedup = 1.0, best.measured
    prog.reason = (
        f"kept as written: the best rewritten program ({best.profile}) measured "
        f"{best.measured}x, not faster beyond noise (predicted {best.predicted:.3g}x)"
    )


def _repeated(fn: Callable[..., Any], inputs: Sequence[Any], calls: int) -> Callable[[], None]:
    """A sample: ``calls`` calls of ``fn`` on ``inputs``."""

    def run() -> None:
        for _ in range(calls):
            fn(*inputs)

    return run


def calls_per_sample(fn: Callable[..., Any], inputs: Sequence[Any]) -> int:
    """Calls of ``fn`` filling about `SAMPLE_SECONDS` (at least 1, at most 10,000)."""
    t = time.perf_counter()
    fn(*inputs)
    one = max(time.perf_counter() - t, 1e-7)
    return int(min(max(SAMPLE_SECONDS / one, 1), 10_000))
