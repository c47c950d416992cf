"""One call from a PyTorch model to a faster one: `optimize_module`.

`optimize_module(module, example_inputs)` imports the module (`rewrite.from_torch`), runs the
verified rewrite search with the given priors and config on a cost-model profile of the target
device, turns the most promising Pareto graphs into modules (`to_module`, each checked against
the original), times them against the original on the device, interleaved, and returns the
fastest with an `OptimizeReport`. A graph is taken only when it is faster than the original
beyond noise (the 95% interval of its measured speedup lies above 1) and its peak memory is not
above the original's; otherwise the original module itself is returned, and the report says why.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.errors import ModuleError
from rewrite.lowering.source import as_called
from rewrite.stats import Interval, paired_ratio_interval

__all__ = [
    "DEPLOY_STEPS",
    "PREFOLD_RULES",
    "Candidate",
    "OptimizeReport",
    "default_profile",
    "deploy_search",
    "optimize_module",
    "prefold",
]

logger = logging.getLogger(__name__)

#: The search's step budget when a model is optimized for deployment (``max_steps`` unless the
#: config names it): every batch norm of ResNet-50 folds within 2,000 steps, a third of them
#: within the tuning studies' 500 (and the search takes seconds, next to a compiler's tens).
DEPLOY_STEPS = 2000


def deploy_config(config: Any) -> Any:
    """``config`` with `DEPLOY_STEPS` as its step budget unless it names one (a `SearchConfig`
    is used as given)."""
    from rewrite.optimize import SearchConfig

    if isinstance(config, SearchConfig):
        return config
    return {"max_steps": DEPLOY_STEPS, **dict(config or {})}


@dataclass(frozen=True)
class Candidate:
    """One Pareto graph tried as a replacement (index -1: the original module).

    Attributes:
        index: Position in the search's `SearchResult.pareto` (-1 for the original).
        rules: Rule name -> times applied from the input graph.
        predicted_speedup: Cost-model latency of the input graph over this graph's.
        predicted_memory_ratio: Cost-model peak memory of this graph over the input's.
        latency: Measured median seconds per call (None when not measured).
        speedup: Measured speedup over the original with its 95% interval (None when not
            measured).
    """

    index: int
    rules: Mapping[str, int]
    predicted_speedup: float
    predicted_memory_ratio: float
    latency: float | None = None
    speedup: Interval | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "index": self.index,
            "rules": dict(self.rules),
            "predicted_speedup": self.predicted_speedup,
            "predicted_memory_ratio": self.predicted_memory_ratio,
            "latency": self.latency,
            "speedup": self.speedup.to_dict() if self.speedup else None,
        }


@dataclass(frozen=True)
class OptimizeReport:
    """What `optimize_module` did and measured.

    Attributes:
        chosen: Index of the chosen Pareto graph, or -1 when the original module was kept.
        reason: Why, in one sentence.
        predicted_speedup: The chosen graph's cost-model speedup (1.0 for the original).
        measured_speedup: Its measured speedup with a 95% interval (None when not measured).
        rules: Rule name -> times applied, for the chosen graph (empty for the original).
        candidates: Every graph tried, the original first.
        device: The torch device measured on.
        profile: The cost-model device profile the search ran on.
        threads: ``torch.get_num_threads()`` during the measurement.
        seconds: Seconds per phase: ``import``, ``search``, ``build`` (modules and their
            checks), ``measure``.
        search: The `SearchResult` (its Pareto graphs and metrics).
    """

    chosen: int
    reason: str
    predicted_speedup: float
    measured_speedup: Interval | None
    rules: Mapping[str, int]
    candidates: tuple[Candidate, ...]
    device: str
    profile: str
    threads: int
    seconds: Mapping[str, float]
    search: Any = field(repr=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (without the search result)."""
        return {
            "chosen": self.chosen,
            "reason": self.reason,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup.to_dict() if self.measured_speedup else None,
            "rules": dict(self.rules),
            "candidates": [c.to_dict() for c in self.candidates],
            "device": self.device,
            "profile": self.profile,
            "threads": self.threads,
            "seconds": dict(self.seconds),
        }

    def __str__(self) -> str:
        lines = [self.reason]
        head = f"{'graph':>8} {'predicted':>10} {'measured':>24} {'memory':>7}  rules"
        lines.append(head)
        for c in self.candidates:
            name = "original" if c.index < 0 else f"#{c.index}"
            meas = (
                f"{c.speedup.value:.3f}x [{c.speedup.low:.3f}, {c.speedup.high:.3f}]"
                if c.speedup
                else "-"
            )
            top = ", ".join(f"{r} x{n}" for r, n in Counter(c.rules).most_common(4))
            lines.append(
                f"{name:>8} {c.predicted_speedup:>9.3f}x {meas:>24} "
                f"{c.predicted_memory_ratio:>6.2f}x  {top}"
            )
        secs = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        lines.append(
            f"device {self.device} ({self.threads} threads), profile {self.profile}; {secs}"
        )
        return "\n".join(lines)


#: Rewrites made where they pay before a deployment search on a profile that folds weights
#: (`prefold`).
PREFOLD_RULES = ("fold_conv_batch_norm",)


def prefold(graph: Any, profile: Any, memory_ratio: float = 1.0) -> tuple[Any, dict[str, int]]:
    """``graph`` with `PREFOLD_RULES` applied where they pay, when ``profile`` folds weights,
    and how many times each was applied.

    On such a profile, folding a batch norm into its convolution removes a per-call kernel; what
    it costs is memory, the scaled weight the module keeps beside the original. The sites are
    folded greedily, most latency saved per byte kept first, while the graph's peak memory stays
    within ``memory_ratio`` times the input's (early convolutions of a CNN, small weights and
    large activations, fold first). The search could make these folds itself, but it can also
    trap itself: a batch norm fused into its convolution's epilogue group first can no longer be
    folded (ResNet-50 on the eager CPU profile: 2,000 steps folded 40 of its 53 batch norms,
    6,000 steps 47).
    """
    from rewrite.costmodel import cost
    from rewrite.devices import load_device
    from rewrite.rules.registry import catalogue

    p = load_device(profile)
    done: dict[str, int] = {}
    if not p.fold_weights:
        return graph, done
    base = cost(graph, p)
    cap = base.peak_memory * memory_ratio
    for rule in (r for r in catalogue() if r.name in PREFOLD_RULES):
        ranked = []
        for site in rule.matches(graph):
            c = cost(rule.apply(graph, site), p, base=base)  # incremental from the base
            saved, kept = base.latency - c.latency, max(c.peak_memory - base.peak_memory, 1)
            if saved > 0:
                ranked.append((-saved / kept, site.anchor))
        for _, anchor in sorted(ranked):
            same = [s for s in rule.matches(graph) if s.anchor == anchor]
            if not same:
                continue
            folded = rule.apply(graph, same[0])
            if cost(folded, p).peak_memory <= cap:
                graph = folded
                done[rule.name] = done.get(rule.name, 0) + 1
        base = cost(graph, p)  # the next rule's sites are costed from here
    return graph, done


def deploy_search(
    graph: Any, config: Any, priors: Any, profile: Any, memory_ratio: float = 1.0
) -> tuple[Any, dict[str, Any]]:
    """The search of a deployment (`optimize_module`, the backend): `prefold` within
    ``memory_ratio``, then the search from the folded graph with `deploy_config`.

    Returns:
        The `SearchResult` and the base its graphs are judged against: ``cost``, the imported
        graph's cost (``latency`` and ``peak_memory``), and ``rules``, the prefolded rules
        (every Pareto graph holds them besides its own, `graph_rules`).
    """
    from rewrite.costmodel import cost
    from rewrite.optimize import search

    folded, rules = prefold(graph, profile, memory_ratio)
    c = cost(graph, profile)
    base = {"cost": {"latency": c.latency, "peak_memory": c.peak_memory}, "rules": rules}
    return search(folded, config=deploy_config(config), priors=priors, device=profile), base


def graph_rules(result: Any, i: int, base: Mapping[str, Any]) -> dict[str, int]:
    """Rule -> times applied, of `deploy_search`'s Pareto graph ``i``: its own and the prefolded."""
    return dict(Counter(base["rules"]) + Counter(result.pareto[i].rules))


def default_profile(device: Any = None, *, compiled: bool = False) -> Any:
    """The cost-model profile for running rewritten modules on a torch device.

    A measured profile shipped for this very machine (its provenance names this CPU or GPU)
    and fitted in the mode asked for (``rewrite.measurement.calibrate(..., compile=compiled)``) is
    returned as is, with ``fold_weights`` on (as `to_module` folds weight-only subgraphs).
    Otherwise the base is this machine's measured eager profile when there is one, else the
    datasheet profile of the device's kind (`rewrite.measurement.calibration.datasheet_profile`),
    returned with ``fold_weights`` on and ``fusion="eager"`` (eager PyTorch runs a fused group op
    by op; on a CPU with oneDNN, ``fused_epilogues`` too: a convolution's epilogue runs in its
    call, `rewrite.epilogue`) or, with ``compiled``, ``fusion="compiled"`` (the module goes to
    Inductor, which generates and fuses every kernel outside the matmul, convolution and
    attention families).

    Returns:
        A `rewrite.DeviceProfile`: a measured one of this mode, or one named ``<base>+eager`` or
        ``<base>+compiled``.
    """
    import dataclasses

    import torch

    from rewrite import devices
    from rewrite.devices import DeviceProfile, load_device
    from rewrite.measurement.calibration import datasheet_profile, device_name
    from rewrite.measurement.timing import torch_device

    dev = torch_device(device)
    here, base = device_name(dev), datasheet_profile(dev)
    mode = "compiled" if compiled else "eager"
    found: dict[str, DeviceProfile] = {}  # fusion mode -> a measured profile of this machine
    for prof in devices.measured_profiles():
        if prof.provenance.get("device_name") == here:
            found.setdefault(prof.fusion, prof)
    epilogues = not compiled and dev.type == "cpu" and torch.backends.mkldnn.is_available()
    if mode in found:  # fitted in this very mode (`rewrite.measurement.calibrate(compile=...)`)
        return dataclasses.replace(found[mode], fold_weights=True, fused_epilogues=epilogues)
    p = found.get("eager") or found.get("kernel") or load_device(base)
    if compiled:
        return dataclasses.replace(
            p, name=f"{p.name}+compiled", fusion="compiled", fold_weights=True
        )
    return dataclasses.replace(
        p, name=f"{p.name}+eager", fusion="eager", fold_weights=True, fused_epilogues=epilogues
    )


def optimize_module(
    module: Any,
    example_inputs: Sequence[Any] | Any,
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    priors: Any = None,
    config: Any = None,
    profile: Any = None,
    measure: bool = True,
    candidates: int = 3,
    memory_ratio: float = 1.0,
    repeats: int = 15,
    seed: int = 0,
) -> tuple[Any, OptimizeReport]:
    """Search for a faster equivalent of ``module`` and return it with a report.

    Args:
        module: A ``torch.nn.Module`` in eval mode with real weights; it runs on its parameters'
            device, where the candidates are measured.
        example_inputs: Positional inputs (a tensor or a sequence); they fix the shapes the
            optimized module accepts.
        example_kwargs: Keyword inputs, e.g. ``{"use_cache": False}`` for a Hugging Face model.
        priors: Rule priors for the search (a `RulePriors`, a dict, a priors file path such as
            ``tuner export``'s, or None for uniform).
        config: A `SearchConfig` or a dict of its knobs (None: a priors file's tuned knobs over
            the defaults, with `DEPLOY_STEPS` steps).
        profile: The cost-model device profile (None: `default_profile` of the device).
        measure: Time the candidates against the original and choose by measurement; False
            chooses the lowest predicted latency without running anything but the checks.
        candidates: How many Pareto graphs (lowest predicted latency first) are built and timed.
        memory_ratio: Most predicted peak memory of a candidate, as a multiple of the
            original's (1.0: not above it; a padded or merged weight is a copy).
        repeats: Timed calls of each candidate and of the original, interleaved.
        seed: Seed of the check inputs and of the intervals.

    Returns:
        ``(optimized, report)``: an `OptimizedModule` (`rewrite.lowering.source`) called as
        ``module`` is (``fast(ids, use_cache=False)``, or the example's tensor inputs
        positionally, keyword ones included in their order) and returning what ``module``
        returns: it runs the chosen graph's ``torch.fx.GraphModule`` (its ``rewritten``
        submodule) or, when none is faster beyond noise, ``module`` itself (its ``original``);
        and its `OptimizeReport`.

    Raises:
        ModuleError: If ``module`` is not a ``torch.nn.Module``, has weights on ``meta``, or a
            candidate graph fails its check against the original.
        TorchImportError: If the module cannot be imported.
    """
    import torch

    _check_options(module, candidates, memory_ratio)
    device = module_device(module)
    profile = profile or default_profile(device)
    seconds: dict[str, float] = {}
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    graph, result, base = _import_and_search(
        module, args, kwargs, (config, priors, profile, memory_ratio), seconds
    )
    tensors = [
        x for x in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)
    ]
    t = time.perf_counter()
    picks = _shortlist(result, candidates, memory_ratio, base)
    modules = {i: _build(result, i, module, tensors, seed, graph) for i in picks}
    seconds["build"] = time.perf_counter() - t
    rows = [_candidate(result, -1, base)] + [_candidate(result, i, base) for i in picks]
    if not picks:
        chosen = -1
        reason = "Kept the original: the search found no graph predicted faster within its memory."
    elif not measure:
        chosen = picks[0]
        reason = f"Chose Pareto graph #{picks[0]}, the lowest predicted latency (not measured)."
    else:
        fns = {-1: lambda: module(*args, **kwargs)} | {
            i: (lambda gm=gm: gm(*tensors)) for i, gm in modules.items()
        }
        t = time.perf_counter()
        timed = _time(fns, device, repeats, seed)
        seconds["measure"] = time.perf_counter() - t
        chosen, reason, rows = _choose_measured(timed, rows, result, base, device, seed)
    runner = modules[chosen] if chosen >= 0 else None
    optimized = as_called(module, args, kwargs, runner)
    return optimized, _report(chosen, reason, rows, result, device, profile, seconds)


def _check_options(module: Any, candidates: Any, memory_ratio: Any) -> None:
    """Refuse `optimize_module`'s bad arguments before any work.

    Raises:
        ModuleError: If ``module`` is not a ``torch.nn.Module``, or ``candidates`` or
            ``memory_ratio`` is out of range.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ModuleError(
            f"optimize_module needs a torch.nn.Module, but got {type(module).__name__}."
        )
    if not isinstance(candidates, int) or candidates < 1:
        raise ModuleError(f"candidates must be an int >= 1, but got {candidates!r}.")
    if not isinstance(memory_ratio, int | float) or not memory_ratio > 0:
        raise ModuleError(f"memory_ratio must be a number > 0, but got {memory_ratio!r}.")


def _import_and_search(
    module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    search: tuple[Any, Any, Any, float],
    seconds: dict[str, float],
) -> tuple[Any, Any, dict[str, Any]]:
    """Import ``module`` on its example call and run `deploy_search` on the graph with
    ``search`` = ``(config, priors, profile, memory_ratio)``; the phases' seconds go into
    ``seconds``.

    Returns:
        ``(graph, result, base)``: the imported graph, and `deploy_search`'s result and base.
    """
    from rewrite.torch_import import from_torch

    t = time.perf_counter()
    check_runs(module, args, kwargs)  # before the import: its errors would be PyTorch's own
    graph = from_torch(module, args, kwargs)
    seconds["import"] = time.perf_counter() - t
    t = time.perf_counter()
    result, base = deploy_search(graph, *search)
    seconds["search"] = time.perf_counter() - t
    return graph, result, base


def _choose_measured(
    timed: Mapping[int, Any],
    rows: list[Candidate],
    result: Any,
    base: Mapping[str, Any],
    device: Any,
    seed: int,
) -> tuple[int, str, list[Candidate]]:
    """The fastest candidate beyond noise, from the timings of the original (``-1``) and of
    every shortlisted candidate.

    Returns:
        ``(chosen, reason, rows)``: the Pareto index chosen (``-1``: the original), why, and the
        candidate rows with their measured latency and speedup over the original.
    """
    original = timed[-1].times
    rows = [
        _candidate(
            result,
            c.index,
            base,
            latency=timed[c.index].latency,
            speedup=paired_ratio_interval(original, timed[c.index].times, seed)
            if c.index >= 0
            else None,
        )
        for c in rows
    ]
    faster = [c for c in rows[1:] if c.speedup is not None and c.speedup.low > 1.0]
    if not faster:
        best_seen = max(rows[1:], key=lambda c: c.speedup.value if c.speedup else 0.0)
        reason = (
            f"Kept the original: no graph is faster beyond noise on {device} (the best, "
            f"#{best_seen.index}, measured {best_seen.speedup}x)."
        )
        return -1, reason, rows
    top = max(faster, key=lambda c: c.speedup.value if c.speedup else 0.0)
    reason = (
        f"Chose Pareto graph #{top.index}: {top.speedup}x faster than the original on "
        f"{device} (predicted {top.predicted_speedup:.3f}x)."
    )
    return top.index, reason, rows


def check_runs(module: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Run ``module`` once on the example inputs (no gradients), so an input it cannot take is
    refused with what to change, not with PyTorch's message from deep inside the model.

    Raises:
        ModuleError: Naming the inputs and the fix: for a dtype that differs from the weights',
            a token id past an embedding's vocabulary, a count of positional inputs the model
            does not take, or any other error of the model on these inputs.
    """
    import torch

    tensors = [x for x in torch.utils._pytree.tree_leaves((args, kwargs)) if torch.is_tensor(x)]
    shown = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)
    try:
        with torch.no_grad():
            module(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - the model's own error, explained below
        raise ModuleError(
            f"the model does not run on the example inputs ({shown}; "
            f"{len(args)} positional, keywords {sorted(kwargs)}): {type(err).__name__}: "
            f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}. "
            f"{_run_hint(module, err, tensors, args)}"
        ) from None


def _run_hint(module: Any, err: Exception, tensors: list[Any], args: tuple[Any, ...]) -> str:
    """What to change when the model fails on its example inputs (`check_runs`)."""
    import torch

    text = str(err)
    weights = {str(p.dtype).removeprefix("torch.") for p in module.parameters()}
    if "dtype" in text or "expected scalar type" in text.lower():
        inputs = {str(t.dtype).removeprefix("torch.") for t in tensors}
        return (
            f"Fix: the inputs' dtypes {sorted(inputs)} and the weights' {sorted(weights)} "
            "differ: cast the inputs (x.to(torch.float32)) or the model (model.to(dtype)); "
            "token ids are int64."
        )
    vocab = [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding)]
    if isinstance(err, IndexError) and vocab:
        ints = [int(t.max()) for t in tensors if not t.is_floating_point() and t.numel()]
        return (
            f"Fix: an index is out of range: the smallest embedding has {min(vocab)} rows and "
            f"the largest integer input is {max(ints, default=0)}; draw token ids below "
            f"{min(vocab)}, e.g. torch.randint(0, {min(vocab)}, shape)."
        )
    if isinstance(err, TypeError) and "positional argument" in text:
        return (
            f"Fix: example_inputs is the tuple of positional arguments ({len(args)} given): "
            "pass (x,) for one input, (x, mask) for two, and keyword ones as example_kwargs."
        )
    return "Fix: call the model on these inputs yourself and correct them."


def module_device(module: Any) -> Any:
    """The device of ``module``'s weights.

    Raises:
        ModuleError: If they are on ``meta`` (no values) or on several devices.
    """
    import torch

    devices = {t.device for t in [*module.parameters(), *module.buffers()]}
    if any(d.type == "meta" for d in devices):
        raise ModuleError(
            "the module has weights on the 'meta' device (built without weights): it cannot run. "
            "Fix: build it on a real device or load its weights first."
        )
    if len(devices) > 1:
        raise ModuleError(
            f"the module's weights live on several devices {sorted(map(str, devices))}; move it "
            "to one device (module.to(device)) first."
        )
    return next(iter(devices), torch.device("cpu"))


def _shortlist(result: Any, n: int, memory_ratio: float, base: Mapping[str, Any]) -> list[int]:
    """Pareto indices predicted faster than the imported graph (``base``, `deploy_search`) with a
    peak memory at most ``memory_ratio`` times its, lowest predicted latency first."""
    base_lat = base["cost"]["latency"]
    base_mem = base["cost"]["peak_memory"] * memory_ratio
    ok = [
        i
        for i, s in enumerate(result.pareto)
        if s.cost["latency"] < base_lat and s.cost["peak_memory"] <= base_mem
    ]
    return sorted(ok, key=lambda i: result.pareto[i].cost["latency"])[:n]


def _build(result: Any, i: int, module: Any, tensors: list[Any], seed: int, origin: Any) -> Any:
    from rewrite.lowering.module import to_module

    return to_module(result.pareto[i].graph, module, origin=origin, inputs=tensors, seed=seed)


def _candidate(
    result: Any,
    i: int,
    base: Mapping[str, Any],
    latency: float | None = None,
    speedup: Interval | None = None,
) -> Candidate:
    if i < 0:
        return Candidate(-1, {}, 1.0, 1.0, latency, None)
    s = result.pareto[i]
    return Candidate(
        i,
        graph_rules(result, i, base),
        base["cost"]["latency"] / s.cost["latency"],
        s.cost["peak_memory"] / max(base["cost"]["peak_memory"], 1.0),
        latency,
        speedup,
    )


def _time(fns: dict[int, Any], device: Any, repeats: int, seed: int) -> dict[int, Any]:
    from rewrite.measurement.timing import time_callables

    named = time_callables({str(k): f for k, f in fns.items()}, device, repeats=repeats, seed=seed)
    return {int(k): m for k, m in named.items()}


def _report(
    chosen: int,
    reason: str,
    rows: list[Candidate],
    result: Any,
    device: Any,
    profile: Any,
    seconds: dict[str, float],
) -> OptimizeReport:
    import torch

    row = next(c for c in rows if c.index == chosen)
    logger.info("optimize_module: %s", reason)
    return OptimizeReport(
        chosen=chosen,
        reason=reason,
        predicted_speedup=row.predicted_speedup,
        measured_speedup=row.speedup if chosen >= 0 else None,
        rules=row.rules,
        candidates=tuple(rows),
        device=str(device),
        profile=str(getattr(profile, "name", profile)),
        threads=torch.get_num_threads(),
        seconds=seconds,
        search=result,
    )
