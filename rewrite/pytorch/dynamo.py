"""A ``torch.compile`` backend: the verified rewrite search, then Inductor.

``torch.compile(model, backend="rewrite")`` (the name is registered through the package's
``torch_dynamo_backends`` entry point, so no import is needed) or, with options,
``torch.compile(model, backend=rewrite.backend(priors="demo-priors.json"))``. For every graph
TorchDynamo captures, the backend

1. imports it (`rewrite.from_torch`; the model's parameters, which Dynamo passes as inputs,
   become the graph's weights, and its buffers constants the import folds),
2. runs the rewrite search on it with the given priors and config within ``time_budget``,
3. keeps the Pareto graph with the lowest predicted latency whose peak memory is at most
   ``memory_ratio`` (1.5) times the input's, searched on the device's profile in Inductor's
   compiled mode (`rewrite.pytorch.default_profile`) and, with ``measure`` (the default), again
   in eager mode,
4. turns them into modules (`rewrite.to_module`: weight-only subgraphs are computed once, checked
   against the captured graph on the example inputs),
5. compiles the first with Inductor (``torch._inductor.compile_fx.compile_fx``) and, with
   ``measure`` (only then is the captured graph compiled too), times it and the eager-mode graph run eagerly against the captured graph compiled
   by Inductor on the example inputs, and keeps the fastest: a CPU runs some rewritten graphs
   faster eagerly than compiled (convolutions with their batch norms folded call oneDNN
   directly), and a rewrite the cost model favours may not pay under the compiler.

A graph the backend cannot take goes to Inductor unchanged, with one warning saying why:
dynamic shapes, a graph that needs gradients (training), an import the IR cannot hold (opaque
ops, mutation, non-tensor outputs), a failed check, or any failure of the backend's own (a
backend must never break a user's compile); a graph with no faster rewrite does too, with an
INFO line. ``torch.compile``'s ``mode`` and ``options`` configure that Inductor compile, and the
one of a rewritten graph. The search's choice is cached on disk by the captured graph's hash
and the options (the profile's contents and the time budget included;
``$REWRITE_CACHE_DIR/compile``, see `rewrite.verify.default_cache_dir`), so compiling the same
model again skips the search.

Weights are read when the graph is compiled: the compiled callable checks, on every call, that
Dynamo passes the same parameter and buffer objects, and that the buffers and the parameters
folded into precomputed values were not modified in place (their version counters); if either
changed it runs the captured graph through Inductor instead, with a warning (compile again to
rewrite the new weights).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.errors import RewriteError
from rewrite.pytorch.choice import choose

__all__ = [
    "HISTORY_SIZE",
    "BackendOptions",
    "CompileRecord",
    "backend",
    "history",
    "rewrite_backend",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendOptions:
    """Options of the ``rewrite`` backend (see `backend`)."""

    priors: Any = None
    config: Mapping[str, Any] | None = None
    profile: Any = None
    time_budget: float = 60.0
    memory_ratio: float = 1.5
    measure: bool = True
    repeats: int = 15
    min_gain: float = 1.02
    cache: bool = True
    inductor: bool = True
    inductor_patches: Mapping[str, Any] = field(default_factory=dict)

    def with_compile_args(
        self, mode: str | None, options: Mapping[str, Any] | None
    ) -> BackendOptions:
        """These options with ``torch.compile``'s ``mode`` and ``options`` for Inductor (its
        config patches: the mode's settings, then ``options``)."""
        if not mode and not options:
            return self
        from dataclasses import replace

        patches: dict[str, Any] = {}
        if mode and mode != "default":
            from torch._inductor import list_mode_options

            patches.update(list_mode_options(mode))
        patches.update(options or {})
        return replace(self, inductor_patches={**self.inductor_patches, **patches})


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
        runner: How the compiled callable runs the graph: ``"inductor"`` (the captured graph,
            unchanged), ``"rewritten+inductor"`` or ``"rewritten eager"``.
        measured: Runner -> median seconds per call on the example inputs (when measured).
        seconds: Seconds per phase (``import``, ``search``, ``build``, ``inductor``,
            ``measure``).
    """

    graph_hash: str
    rewritten: bool
    reason: str
    predicted_speedup: float = 1.0
    rules: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    runner: str = "inductor"
    measured: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


#: Most records `history` keeps.
HISTORY_SIZE = 1024

#: The last `HISTORY_SIZE` graphs the backend compiled in this process, oldest first (older
#: ones are dropped; ``history.clear()`` empties it).
history: deque[CompileRecord] = deque(maxlen=HISTORY_SIZE)


def backend(
    *,
    priors: Any = None,
    config: Mapping[str, Any] | None = None,
    profile: Any = None,
    time_budget: float = 60.0,
    memory_ratio: float = 1.5,
    measure: bool = True,
    repeats: int = 15,
    min_gain: float = 1.02,
    cache: bool = True,
    inductor: bool = True,
) -> Callable[[Any, list[Any]], Callable[..., Any]]:
    """The ``rewrite`` backend with options, for ``torch.compile(model, backend=...)``.

    Args:
        priors: Rule priors of the search (a `RulePriors`, a dict, a priors file path, None).
        config: A dict of `SearchConfig` knobs (e.g. ``{"max_steps": 300}``; the step budget
            defaults to `rewrite.pytorch.optimize.DEPLOY_STEPS`).
        profile: The cost-model device profile (None: `rewrite.pytorch.default_profile` of the
            device the graph's tensors are on).
        time_budget: Seconds the search may take per captured graph (its ``time_budget``).
        memory_ratio: Most predicted peak memory of the chosen graph, as a multiple of the
            captured graph's; a padded weight or a convolution weight scaled by its batch norm
            is a copy the module keeps beside the model's own (as Inductor's freezing makes
            packed copies), and counts.
        measure: Time, on the example inputs and interleaved, the captured graph compiled by
            Inductor against the rewritten graph compiled by Inductor and run eagerly, and keep
            the fastest (a rewritten runner only when the 95% bootstrap interval of its
            speedup, paired by round, `rewrite.stats.paired_ratio_interval`, lies above 1):
            the backend is then never slower than plain Inductor beyond the noise of
            ``repeats`` calls, at the price of compiling the captured graph too. False: compile
            the rewritten graph when its predicted speedup is at least ``min_gain``.
        repeats: Timed calls of each runner when measuring.
        min_gain: Least predicted speedup worth compiling the rewritten graph without measuring.
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
    if not isinstance(memory_ratio, int | float) or not memory_ratio > 0:
        raise RewriteError(f"memory_ratio must be a number > 0, but got {memory_ratio!r}.")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise RewriteError(f"repeats must be an int >= 1, but got {repeats!r}.")
    if config is not None and not isinstance(config, Mapping):
        raise RewriteError(
            f"config must be a dict of SearchConfig knobs or None, but got {type(config).__name__}."
        )
    opts = BackendOptions(
        priors,
        dict(config or {}),
        profile,
        float(time_budget),
        float(memory_ratio),
        bool(measure),
        repeats,
        float(min_gain),
        cache,
        inductor,
    )

    def compile_with_rewrites(
        gm: Any,
        example_inputs: list[Any],
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        return _compile(gm, example_inputs, opts.with_compile_args(mode, options))

    return compile_with_rewrites


def rewrite_backend(
    gm: Any,
    example_inputs: list[Any],
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The ``rewrite`` backend with default options (what ``backend="rewrite"`` names).

    ``mode`` and ``options`` are what ``torch.compile(..., mode=..., options=...)`` passes a
    backend; they configure Inductor, which compiles the graph the backend chooses.
    """
    return _compile(gm, example_inputs, BackendOptions().with_compile_args(mode, options))


class _Fallback(Exception):
    """The captured graph goes to Inductor unchanged, for the reason given.

    Args:
        reason: Why, for the log line and `CompileRecord.reason`.
        compiled: The captured graph already compiled by Inductor, when it was.
        expected: A normal outcome (no faster graph: logged at INFO), not a graph the backend
            cannot take (logged as a WARNING).
    """

    def __init__(self, reason: str, compiled: Any = None, expected: bool = False) -> None:
        super().__init__(reason)
        self.compiled, self.expected = compiled, expected


def _compile(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Callable[..., Any]:
    """The backend: the rewrite path, or the captured graph through Inductor, with one log line
    saying why, on a graph it cannot take and on any failure of its own (a backend must never
    break a user's compile)."""
    record = CompileRecord("", False, "")
    history.append(record)
    compiled, level = None, logging.WARNING
    try:
        return _rewrite(gm, example_inputs, opts, record)
    except _Fallback as e:
        record.reason, compiled = str(e), e.compiled
        level = logging.INFO if e.expected else logging.WARNING
    except RewriteError as e:
        record.reason = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any failure of the backend's own goes to Inductor
        record.reason = f"the backend failed ({type(e).__name__}: {e}); please report it"
    logger.log(level, "rewrite backend: graph compiled by Inductor unchanged: %s", record.reason)
    return compiled if compiled is not None else _inductor(gm, example_inputs, opts)


def _inductor(gm: Any, example_inputs: list[Any], opts: BackendOptions) -> Callable[..., Any]:
    if not opts.inductor:
        return gm.forward
    from torch._inductor.compile_fx import compile_fx

    patches = dict(opts.inductor_patches)
    compiled: Callable[..., Any] = (
        compile_fx(gm, example_inputs, config_patches=patches)  # type: ignore[assignment]
        if patches
        else compile_fx(gm, example_inputs)
    )
    return compiled


# ---------------------------------------------------------------- the rewrite path
def _rewrite(
    gm: Any, example_inputs: list[Any], opts: BackendOptions, record: CompileRecord
) -> Callable[..., Any]:
    import torch

    from rewrite.lowering.module import to_module

    _check_capturable(example_inputs)
    state_idx = [i for i, n in enumerate(_placeholders(gm)) if _is_state(n, example_inputs[i])]
    user_idx = [i for i in range(len(example_inputs)) if i not in state_idx]
    wrapper = _captured(gm, example_inputs, state_idx)
    user_inputs = [example_inputs[i] for i in user_idx]
    t = time.perf_counter()
    graph = _import(wrapper, user_inputs, _buffers(wrapper))
    record.graph_hash = graph.hash
    record.seconds["import"] = time.perf_counter() - t
    t = time.perf_counter()
    device = user_inputs[0].device if user_inputs else torch.device("cpu")
    choices = {
        runner: choose(graph, opts, profile) for runner, profile in _profiles(opts, device).items()
    }
    record.seconds["search"] = time.perf_counter() - t
    record.cached = all(c.cached for c in choices.values())
    choices = {
        k: c
        for k, c in choices.items()
        if c.graph.hash != graph.hash and (opts.measure or c.predicted_speedup >= opts.min_gain)
    }
    if not choices:
        raise _Fallback(
            f"the search found no graph predicted at least {opts.min_gain}x faster",
            expected=True,
        )
    t = time.perf_counter()
    modules: dict[str, Any] = {}
    for c in choices.values():
        if c.graph.hash not in modules:
            modules[c.graph.hash] = to_module(c.graph, wrapper, inputs=user_inputs)
    record.seconds["build"] = time.perf_counter() - t
    t = time.perf_counter()
    original = _inductor(gm, example_inputs, opts) if opts.measure else None  # to time it
    runners = {
        k: (
            modules[c.graph.hash].forward
            if k == "rewritten eager"
            else _inductor(modules[c.graph.hash], user_inputs, opts)
        )
        for k, c in choices.items()
    }
    record.seconds["inductor"] = time.perf_counter() - t
    if opts.measure:
        t = time.perf_counter()
        assert original is not None
        fastest = _fastest(original, runners, example_inputs, user_idx, opts, record)
        record.seconds["measure"] = time.perf_counter() - t
        if fastest == "inductor":
            raise _Fallback(
                f"measured on the example inputs, no rewritten runner beat the captured graph "
                f"compiled by Inductor beyond noise ({_times(record)})",
                compiled=original,
                expected=True,
            )
    else:
        fastest = next(iter(runners))
    chosen = choices[fastest]
    record.runner, record.rewritten = fastest, True
    record.rules, record.predicted_speedup, record.reason = (
        chosen.rules,
        chosen.predicted_speedup,
        chosen.reason,
    )
    folded = _folded_params(chosen.graph) | set(_buffers(wrapper))
    guards = [(i, example_inputs[i], wrapper.slots[i] in folded) for i in state_idx]
    return _Guarded(
        runners[fastest],
        user_idx,
        guards,
        lambda: original if original is not None else _inductor(gm, example_inputs, opts),
    )


def _profiles(opts: BackendOptions, device: Any) -> dict[str, Any]:
    """Runner -> the cost-model profile its graph is searched on: Inductor's compiled mode for
    the compiled runner and, when measuring, eager PyTorch for the eager one (a profile the user
    gave serves both)."""
    from rewrite.pytorch.optimize import default_profile

    if not opts.inductor:
        return {"rewritten eager": opts.profile or default_profile(device)}
    out = {"rewritten+inductor": opts.profile or default_profile(device, compiled=True)}
    if opts.measure:
        out["rewritten eager"] = opts.profile or default_profile(device)
    return out


def _fastest(
    original: Callable[..., Any],
    runners: dict[str, Callable[..., Any]],
    example_inputs: list[Any],
    user_idx: list[int],
    opts: BackendOptions,
    record: CompileRecord,
) -> str:
    """Time the captured graph under Inductor against the rewritten runners, interleaved on
    the example inputs; the name of the fastest (``"inductor"`` for the captured graph)."""
    from rewrite.measurement.timing import time_callables
    from rewrite.stats import paired_ratio_interval

    user = [example_inputs[i] for i in user_idx]
    fns = {"inductor": lambda: original(*example_inputs)} | {
        name: (lambda f=f: f(*user)) for name, f in runners.items()
    }
    device = user[0].device if user else "cpu"
    timed = time_callables(fns, device, repeats=opts.repeats, warmup=2)
    record.measured = {k: m.latency for k, m in timed.items()}
    base = timed["inductor"].times
    best = min(timed, key=lambda k: timed[k].latency)
    if best == "inductor":
        return best
    # faster beyond noise: the 95% interval of its speedup over the captured graph above 1
    return best if paired_ratio_interval(base, timed[best].times).low > 1.0 else "inductor"


def _times(record: CompileRecord) -> str:
    return ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in record.measured.items())


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


def _buffers(wrapper: Any) -> dict[str, Any]:
    """The model's buffers (not parameters) by their name in ``wrapper``: the import folds them
    as constants (position ids, batch-norm statistics in eval mode), guarded by their versions."""
    return dict(wrapper.named_buffers(recurse=False))


def _import(wrapper: Any, user_inputs: list[Any], constants: dict[str, Any]) -> Any:
    import warnings

    from rewrite.errors import OpaqueOpWarning
    from rewrite.torch_import import from_torch

    with warnings.catch_warnings():
        warnings.simplefilter("error", OpaqueOpWarning)
        try:
            graph = from_torch(wrapper, user_inputs, name="captured", constants=constants)
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
    from rewrite.lowering.module import _static_nodes

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
        try:
            return self.compiled(*[args[i] for i in self.user_idx])
        except Exception as e:  # noqa: BLE001 - the backend's runner failed: Inductor's runs
            logger.warning(
                "rewrite backend: the rewritten graph failed (%s: %s); running the captured "
                "graph through Inductor from now on",
                type(e).__name__,
                e,
            )
            self.fallback = fallback = self.make_fallback()
            return fallback(*args)
