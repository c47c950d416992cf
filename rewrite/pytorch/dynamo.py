"""A ``torch.compile`` backend: the verified rewrite search, then Inductor.

``torch.compile(model, backend="rewrite")`` (the name is registered through the package's
``torch_dynamo_backends`` entry point, so no import is needed) or, with options,
``torch.compile(model, backend=rewrite.backend(priors="demo-priors.json"))``. For every graph
TorchDynamo captures, the backend

1. imports it (`rewrite.from_torch`; the model's parameters and buffers, which Dynamo passes as
   inputs, become the graph's weights),
2. runs the rewrite search on it with the given priors and config within ``time_budget``,
3. keeps the Pareto graph with the lowest predicted latency whose peak memory is not above the
   input's (the input graph when none is faster),
4. turns it into a module (`rewrite.to_module`: weight-only subgraphs are computed once, checked
   against the captured graph on the example inputs) and hands that to Inductor
   (``torch._inductor.compile_fx.compile_fx``).

A graph the backend cannot take goes to Inductor unchanged, with one warning saying why:
dynamic shapes, a graph that needs gradients (training), an import the IR cannot hold (opaque
ops, mutation, non-tensor outputs), a failed check. The search's choice is cached on disk by the
captured graph's hash and the options (``$REWRITE_CACHE_DIR/compile``, see
`rewrite.verify.default_cache_dir`), so compiling the same model again skips the search.

Weights are read when the graph is compiled: the compiled callable checks, on every call, that
Dynamo passes the same parameter and buffer objects, and that the ones folded into precomputed
buffers were not modified in place (their version counters); if either changed it runs the
captured graph through Inductor instead, with a warning (compile again to rewrite the new
weights).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewrite.errors import RewriteError

__all__ = ["BackendOptions", "CompileRecord", "backend", "rewrite_backend"]

logger = logging.getLogger(__name__)

#: Version of the cached records; bump when the choice a record stores would change meaning.
CACHE_VERSION = 1


@dataclass(frozen=True)
class BackendOptions:
    """Options of the ``rewrite`` backend (see `backend`)."""

    priors: Any = None
    config: Mapping[str, Any] | None = None
    profile: Any = None
    time_budget: float = 60.0
    cache: bool = True
    inductor: bool = True


@dataclass
class CompileRecord:
    """What the backend did with one captured graph (``rewrite.pytorch.dynamo.history``).

    Attributes:
        graph_hash: Hash of the imported graph ("" when the import failed).
        rewritten: Whether a rewritten graph was compiled (False: the captured graph went to
            Inductor unchanged).
        reason: Why not, or which graph was taken.
        predicted_speedup: Cost-model latency of the input over the chosen graph's.
        rules: Rule name -> times applied in the chosen graph.
        cached: Whether the choice came from the on-disk cache.
        seconds: Seconds per phase (``import``, ``search``, ``build``, ``inductor``).
    """

    graph_hash: str
    rewritten: bool
    reason: str
    predicted_speedup: float = 1.0
    rules: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


#: Every graph the backend compiled in this process, oldest first.
history: list[CompileRecord] = []


def backend(
    *,
    priors: Any = None,
    config: Mapping[str, Any] | None = None,
    profile: Any = None,
    time_budget: float = 60.0,
    cache: bool = True,
    inductor: bool = True,
) -> Callable[[Any, list[Any]], Callable[..., Any]]:
    """The ``rewrite`` backend with options, for ``torch.compile(model, backend=...)``.

    Args:
        priors: Rule priors of the search (a `RulePriors`, a dict, a priors file path, None).
        config: A dict of `SearchConfig` knobs (e.g. ``{"max_steps": 300}``).
        profile: The cost-model device profile (None: `rewrite.pytorch.default_profile` of the
            device the graph's tensors are on).
        time_budget: Seconds the search may take per captured graph (its ``time_budget``).
        cache: Reuse and store the search's choice on disk.
        inductor: Compile the chosen graph with Inductor (False: run it eagerly, for tests and
            for measuring what the rewrites alone give).

    Returns:
        A backend function ``(GraphModule, example_inputs) -> callable``.

    Raises:
        RewriteError: On a ``time_budget`` that is not a positive number.
    """
    if not isinstance(time_budget, int | float) or not time_budget > 0:
        raise RewriteError(f"time_budget must be a number of seconds > 0, but got {time_budget!r}.")
    if config is not None and not isinstance(config, Mapping):
        raise RewriteError(
            f"config must be a dict of SearchConfig knobs or None, but got {type(config).__name__}."
        )
    opts = BackendOptions(priors, dict(config or {}), profile, float(time_budget), cache, inductor)
    return lambda gm, example_inputs: _compile(gm, example_inputs, opts)


def rewrite_backend(gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
    """The ``rewrite`` backend with default options (what ``backend="rewrite"`` names)."""
    return _compile(gm, example_inputs, BackendOptions())


class _Fallback(Exception):
    """The captured graph goes to Inductor unchanged, for the reason given."""


def _compile(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Callable[..., Any]:
    record = CompileRecord("", False, "")
    history.append(record)
    try:
        return _rewrite(gm, example_inputs, opts, record)
    except _Fallback as e:
        record.reason = str(e)
    except RewriteError as e:
        record.reason = f"{type(e).__name__}: {e}"
    logger.warning("rewrite backend: graph compiled by Inductor unchanged: %s", record.reason)
    return _inductor(gm, example_inputs, opts)


def _inductor(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Callable[..., Any]:
    if not opts.inductor:
        return gm.forward
    from torch._inductor.compile_fx import compile_fx

    compiled: Callable[..., Any] = compile_fx(gm, example_inputs)  # type: ignore[assignment]
    return compiled


# ---------------------------------------------------------------- the rewrite path
def _rewrite(
    gm: Any, example_inputs: list[Any], opts: BackendOptions, record: CompileRecord
) -> Callable[..., Any]:
    import torch

    _check_capturable(example_inputs)
    state_idx = [i for i, n in enumerate(_placeholders(gm)) if _is_state(n, example_inputs[i])]
    user_idx = [i for i in range(len(example_inputs)) if i not in state_idx]
    wrapper = _captured(gm, example_inputs, state_idx)
    user_inputs = [example_inputs[i] for i in user_idx]
    t = time.perf_counter()
    graph = _import(wrapper, user_inputs)
    record.graph_hash = graph.hash
    record.seconds["import"] = time.perf_counter() - t
    t = time.perf_counter()
    device = user_inputs[0].device if user_inputs else torch.device("cpu")
    chosen, record.cached = _choose(graph, opts, device, record)
    record.seconds["search"] = time.perf_counter() - t
    t = time.perf_counter()
    from rewrite.pytorch.module import to_module

    rewritten = to_module(chosen, wrapper, inputs=user_inputs)
    folded = _folded_params(chosen)
    record.seconds["build"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = _inductor(rewritten, user_inputs, opts)
    record.seconds["inductor"] = time.perf_counter() - t
    record.rewritten = True
    guards = [(i, example_inputs[i], wrapper.slots[i] in folded) for i in state_idx]
    return _Guarded(compiled, user_idx, guards, lambda: _inductor(gm, example_inputs, opts))


def _check_capturable(example_inputs: Sequence[Any]) -> None:
    import torch

    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            raise _Fallback(
                f"an input is a {type(x).__name__} (a symbolic size: dynamic shapes), and the IR's "
                "shapes are static; compile with dynamic=False to rewrite"
            )
        if any(isinstance(d, torch.SymInt) for d in x.shape):
            raise _Fallback(
                "dynamic shapes (the IR's shapes are static); compile with dynamic=False"
            )
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        raise _Fallback(
            "the graph needs gradients (training); the backend rewrites inference graphs: run the "
            "model under torch.no_grad() or torch.inference_mode()"
        )


def _placeholders(gm: Any) -> list[Any]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _is_state(node: Any, example: Any) -> bool:
    """Whether a placeholder is a parameter or buffer of the model (Dynamo passes those as
    inputs): its source reads a module's ``_parameters`` or ``_buffers``."""
    import torch

    if isinstance(example, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    while source is not None:
        if type(source).__name__.endswith("ParamBufferSource"):
            return True
        source = getattr(source, "base", None)
    return False


def _captured(gm: Any, example_inputs: list[Any], state_idx: list[int]) -> Any:
    """The captured graph as a module whose weights (``w0``, ``w1``, ...) are the model's
    parameters and buffers (the same tensors) and whose inputs are the rest."""
    import torch

    class Captured(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm
            self.slots = dict(zip(state_idx, (f"w{k}" for k in range(len(state_idx)))))
            self.n = len(example_inputs)
            for i, name in self.slots.items():
                t = example_inputs[i]
                if isinstance(t, torch.nn.Parameter):
                    self.register_parameter(name, t)
                else:
                    self.register_buffer(name, t)

        def forward(self, *user: Any) -> Any:
            it = iter(user)
            full = [
                getattr(self, self.slots[i]) if i in self.slots else next(it) for i in range(self.n)
            ]
            return tuple(self.gm(*full))

    return Captured()


def _import(wrapper: Any, user_inputs: list[Any]) -> Any:
    import warnings

    from rewrite.errors import OpaqueOpWarning
    from rewrite.torch_import import from_torch

    with warnings.catch_warnings():
        warnings.simplefilter("error", OpaqueOpWarning)
        try:
            graph = from_torch(wrapper, user_inputs, name="captured")
        except OpaqueOpWarning as e:
            raise _Fallback(f"ops the IR does not know: {e}") from None
    out = next(n for n in wrapper.gm.graph.nodes if n.op == "output").args[0]
    n_out = len(out) if isinstance(out, tuple | list) else 1
    if len(graph.outputs) != n_out:
        raise _Fallback(
            f"the graph returns {n_out} values of which only {len(graph.outputs)} are tensors "
            "the IR holds"
        )
    return graph


def _folded_params(graph: Any) -> set[str]:
    """Names of the weights some build-time folded computation reads."""
    from rewrite.pytorch.module import _static_nodes

    static = _static_nodes(graph)
    out = set()
    for node in graph:
        if node.id in static and node.op not in ("param", "const"):
            for v in node.inputs:
                src = graph.node(v.node)
                if src.op == "param":
                    out.add(src.attrs["name"])
    return out


class _Guarded:
    """The compiled rewritten graph, called with Dynamo's full input list."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        user_idx: list[int],
        guards: list[tuple[int, Any, bool]],
        fallback: Callable[[], Callable[..., Any]],
    ) -> None:
        self.compiled, self.user_idx = compiled, user_idx
        self.same = [(i, t) for i, t, _ in guards]
        self.versions = [(i, t, t._version) for i, t, folded in guards if folded]
        self.make_fallback = fallback
        self.fallback: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self.fallback is not None:
            return self.fallback(*args)
        if any(args[i] is not t for i, t in self.same) or any(
            t._version != v for _, t, v in self.versions
        ):
            logger.warning(
                "rewrite backend: the model's weights changed since it was compiled; running "
                "the captured graph through Inductor (compile again to rewrite the new weights)."
            )
            self.fallback = fallback = self.make_fallback()
            return fallback(*args)
        return self.compiled(*[args[i] for i in self.user_idx])


# ---------------------------------------------------------------- choosing (and caching)
def _choose(
    graph: Any, opts: BackendOptions, device: Any, record: CompileRecord
) -> tuple[Any, bool]:
    """The graph to compile, and whether it came from the cache."""
    from rewrite.optimize import search
    from rewrite.pytorch.optimize import default_profile
    from rewrite.serialize import from_json, to_json, write_text_atomic

    profile = opts.profile or default_profile(device)
    config = {"time_budget": opts.time_budget, **dict(opts.config or {})}
    key = _cache_key(graph, opts, profile, config)
    path = _cache_dir() / f"{key}.json"
    if opts.cache and path.exists():
        try:
            rec = json.loads(path.read_text())
            record.reason = rec["reason"]
            record.rules = rec["rules"]
            record.predicted_speedup = rec["predicted_speedup"]
            return from_json(rec["graph"]), True
        except (OSError, ValueError, KeyError, RewriteError):
            logger.warning("rewrite backend: ignoring an unreadable cache record %s", path)
    result = search(graph, config=config, priors=opts.priors, device=profile)
    from rewrite.pytorch.optimize import _shortlist

    picks = _shortlist(result, 1)
    if picks:
        best = result.pareto[picks[0]]
        chosen = best.graph
        record.rules = dict(_count(best.rules))
        record.predicted_speedup = result.input_cost["latency"] / best.cost["latency"]
        record.reason = f"Pareto graph #{picks[0]}, predicted {record.predicted_speedup:.3f}x"
    else:
        chosen = graph
        record.reason = "no graph predicted faster within the input's memory: the input graph"
    if opts.cache:
        rec = {
            "format_version": CACHE_VERSION,
            "reason": record.reason,
            "rules": record.rules,
            "predicted_speedup": record.predicted_speedup,
            "graph": to_json(chosen),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(rec))
        except OSError as e:
            logger.warning("rewrite backend: could not write the cache record %s: %s", path, e)
    return chosen, False


def _count(rules: Sequence[str]) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(rules))


def _cache_dir() -> Path:
    from rewrite.verify.cache import default_cache_dir

    return default_cache_dir() / "compile"


def _cache_key(graph: Any, opts: BackendOptions, profile: Any, config: Mapping[str, Any]) -> str:
    from rewrite.optimize import RulePriors

    priors = RulePriors.coerce(opts.priors)
    parts = {
        "version": CACHE_VERSION,
        "graph": graph.hash,
        "priors": priors.to_dict() if hasattr(priors, "to_dict") else repr(priors),
        "config": {k: config[k] for k in sorted(config) if k != "time_budget"},
        "profile": str(getattr(profile, "name", profile)),
    }
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=repr).encode(), digest_size=16
    ).hexdigest()
