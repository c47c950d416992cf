"""Timing and peak memory of lowered graphs on a real device.

`measure(graph)` lowers the graph (`rewrite.measurement.lower`), binds seeded random inputs and
weights of the declared dtypes, runs ``warmup`` untimed calls and ``repeats`` timed ones, and
returns a `Measurement`:

* ``latency``: the median time of one run on the chosen ``clock``: CUDA events around each run
  after a synchronize on CUDA; on a CPU the process CPU time (``time.process_time``) when torch
  runs one thread, else the wall time (``time.perf_counter``). With one thread the CPU time is
  the wall time the run would take on an idle machine, and it does not count the time other
  processes take the core away (wall times on a shared machine are inflated by that, often 2-3x
  in the tail). ``clock="wall"`` forces wall time. ``interval`` is a 95% bootstrap interval of
  the median (`rewrite.stats.interval`: seeded resamples of the repeats); ``wall``
  and ``cpu_time`` are the medians of both clocks (``cpu_time`` 0 on CUDA).
* ``peak_memory`` (bytes): CUDA: ``torch.cuda.max_memory_allocated`` over one run after
  resetting the peak (weights and inputs included). CPU: the peak, over the steps of one run, of
  the bytes of the distinct tensor storages alive in the program (weights, inputs, and every
  value some later step still reads), the same liveness the cost model's ``peak_memory`` uses;
  scratch memory inside a kernel or a fused region is not seen.

`node_times(graph)` times every node on its own (on CUDA the device's time apart from the host's
time to issue it), the data `rewrite.calibrate` fits profiles to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rewrite.errors import MeasureError
from rewrite.ir import Graph, Node
from rewrite.lowering.program import Program, lower
from rewrite.lowering.tensors import random_tensors, tensor_for
from rewrite.stats import interval

__all__ = [
    "STATISTICS",
    "Measurement",
    "NodeTimes",
    "default_device",
    "measure",
    "node_times",
    "random_tensors",
    "time_callables",
    "torch_device",
]


#: How repeated timings of one thing are summarized: the median (the default), or the minimum,
#: the run least disturbed by other processes (contention only adds time).
STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": lambda ts: float(np.median(ts)),
    "min": lambda ts: float(np.min(ts)),
}


@dataclass(frozen=True)
class Measurement:
    """Measured run time and memory of one graph on one device (see the module docstring).

    Attributes:
        latency: Median seconds per run on `clock`.
        interval: 95% bootstrap interval ``(low, high)`` of the median, seconds.
        peak_memory: Peak bytes (see the module docstring for how each device measures it).
        wall: Median wall seconds per run (CUDA events on CUDA).
        cpu_time: Median process CPU seconds per run (0 on CUDA).
        clock: ``"cuda"``, ``"cpu"`` (process time) or ``"wall"``: what `latency` counts.
        repeats: Timed runs.
        device: The torch device, e.g. ``"cpu"`` or ``"cuda:0"``.
        threads: ``torch.get_num_threads()`` during the runs.
        compiled: Whether fused groups ran through ``torch.compile``.
        times: Every timed run, seconds.
    """

    latency: float
    interval: tuple[float, float]
    peak_memory: int
    wall: float
    cpu_time: float
    clock: str
    repeats: int
    device: str
    threads: int
    compiled: bool
    times: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields (``times`` rounded to nanoseconds)."""
        d = asdict(self)
        d["interval"] = list(self.interval)
        d["times"] = [round(t, 9) for t in self.times]
        return d


def default_device() -> str:
    """``"cuda"`` when PyTorch sees a CUDA device, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_device(device: Any) -> Any:
    """The ``torch.device`` of ``device`` (None: CUDA when present, else the CPU).

    Raises:
        MeasureError: If CUDA is asked for and PyTorch sees no CUDA device.
    """
    import torch

    dev = torch.device(default_device() if device is None else device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MeasureError(
            f"device {str(device)!r} needs CUDA, but PyTorch sees no CUDA device; pass "
            "device='cpu' or None (CUDA when present, else the CPU)."
        )
    return dev


def _bind(
    graph: Graph, dev: Any, inputs: Sequence[Any] | Mapping[str, Any] | None, seed: int
) -> tuple[list[Any], dict[str, Any]]:
    rand_in, params = random_tensors(graph, dev, seed)
    if inputs is None:
        return rand_in, params
    if isinstance(inputs, Mapping):
        missing = [n for n in graph.input_names if n not in inputs]
        if missing:
            raise MeasureError(
                f"inputs lacks {missing}; graph {graph.name!r} takes {list(graph.input_names)}."
            )
        inputs = [inputs[n] for n in graph.input_names]
    if len(inputs) != len(graph.inputs):
        raise MeasureError(
            f"graph {graph.name!r} takes {len(graph.inputs)} inputs, but got {len(inputs)}."
        )
    out = []
    for a, nid in zip(inputs, graph.inputs):
        t = tensor_for(a, graph.node(nid), dev)
        if tuple(t.shape) != graph.node(nid).types[0].shape:
            raise MeasureError(
                f"input {graph.node(nid).attrs['name']!r} must have shape "
                f"{graph.node(nid).types[0].shape}, but got {tuple(t.shape)}."
            )
        out.append(t)
    return out, params


def _sync(dev: Any) -> None:
    if dev.type == "cuda":
        import torch

        torch.cuda.synchronize(dev)


def _live_bytes(program: Program, args: list[Any], params: Mapping[str, Any]) -> int:
    resident = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in params.values()
    }
    peak = 0

    def hook(i: int, node: Node, env: list[tuple[Any, ...] | None]) -> None:
        nonlocal peak
        live: dict[int, int] = {}
        for outs in env:
            for t in outs or ():
                s = t.untyped_storage()
                if s.data_ptr() not in resident:
                    live[s.data_ptr()] = s.nbytes()
        peak = max(peak, sum(live.values()))

    program.run(args, params, hook)
    return sum(resident.values()) + peak


def _clock(dev: Any, clock: str) -> str:
    import torch

    if clock not in ("auto", "wall"):
        raise MeasureError(f"clock must be 'auto' or 'wall', but got {clock!r}.")
    if dev.type == "cuda":
        return "cuda"
    return "cpu" if clock == "auto" and torch.get_num_threads() == 1 else "wall"


def _check_counts(repeats: int, warmup: int) -> None:
    if not (isinstance(repeats, int) and repeats >= 1 and isinstance(warmup, int) and warmup >= 0):
        raise MeasureError(
            f"measure needs repeats >= 1 and warmup >= 0 (ints), but got {repeats=}, {warmup=}."
        )


def _time_runs(
    run: Callable[[], Any], dev: Any, warmup: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Wall (CUDA-event on CUDA) and process CPU seconds of each of ``repeats`` calls."""
    for _ in range(warmup):
        run()
    _sync(dev)
    times, cpu = [], []
    for _ in range(repeats):
        wall, c = _time_once(run, dev)
        times.append(wall)
        cpu.extend([c] if c is not None else [])
    return times, cpu


def _time_once(run: Callable[[], Any], dev: Any) -> tuple[float, float | None]:
    """Wall (CUDA-event on CUDA) and process CPU seconds (None on CUDA) of one call."""
    import torch

    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize(dev)
        return start.elapsed_time(end) / 1e3, None
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


def time_callables(
    fns: Mapping[str, Callable[[], Any]],
    device: Any = None,
    *,
    repeats: int = 20,
    warmup: int = 3,
    seed: int = 0,
    clock: str = "auto",
) -> dict[str, Measurement]:
    """Time several zero-argument callables on one device, interleaved.

    Round ``r`` runs every callable once, in a rotated order, so drift of the machine (another
    process, frequency changes) falls on all of them alike; compare the results as ratios
    (`rewrite.stats.paired_ratio_interval` of their ``times``, round by round).

    Args:
        fns: Name -> callable running the model once (e.g. ``lambda: model(x)``).
        device: The torch device they run on (for synchronization and the clock).
        repeats: Timed rounds.
        warmup: Untimed rounds first (compilation, caches, allocator).
        seed: Seed of the bootstrap intervals.
        clock: As for `measure`.

    Returns:
        Name -> `Measurement` (``peak_memory`` 0: not measured here).

    Raises:
        MeasureError: On bad counts or a missing CUDA device.
    """
    import torch

    _check_counts(repeats, warmup)
    dev = torch_device(device)
    clk = _clock(dev, clock)
    names = list(fns)
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    with torch.inference_mode():
        for _ in range(warmup):
            for n in names:
                fns[n]()
        _sync(dev)
        for r in range(repeats):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                wall, c = _time_once(fns[n], dev)
                walls[n].append(wall)
                cpus[n].extend([c] if c is not None else [])
    return {n: _measurement(walls[n], cpus[n], clk, dev, 0, False, seed) for n in names}


def _measurement(
    walls: list[float],
    cpus: list[float],
    clk: str,
    dev: Any,
    peak: int,
    compiled: bool,
    seed: int,
) -> Measurement:
    """A `Measurement` of timed runs: medians of both clocks, the interval of the chosen one."""
    import torch

    arr = np.asarray(cpus if clk == "cpu" else walls)
    iv = interval(arr.tolist(), np.median, seed)
    return Measurement(
        latency=float(np.median(arr)),
        interval=(iv.low, iv.high),
        peak_memory=peak,
        wall=float(np.median(walls)),
        cpu_time=float(np.median(cpus)) if cpus else 0.0,
        clock=clk,
        repeats=len(arr),
        device=str(dev),
        threads=torch.get_num_threads(),
        compiled=compiled,
        times=tuple(float(t) for t in arr),
    )


def _compiled(graph: Graph, args: list[Any], params: dict[str, Any]) -> Callable[[], Any]:
    """A call of ``graph`` compiled whole by ``torch.compile`` (Inductor), as a module with
    ``params`` as its weights (`rewrite.to_module`; weight-only subgraphs folded)."""
    import torch

    from rewrite.lowering.module import to_module

    compiled = torch.compile(to_module(graph, params, check=False))
    return lambda: compiled(*args)


def _peak_memory(
    program: Program,
    args: list[Any],
    params: dict[str, Any],
    dev: Any,
    run: Callable[[], Any] | None = None,
) -> int:
    if dev.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(dev)
        run() if run is not None else program.run(args, params)
        _sync(dev)
        return int(torch.cuda.max_memory_allocated(dev))
    return _live_bytes(program, args, params)


def measure(
    graph: Graph,
    device: Any = None,
    inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    *,
    repeats: int = 20,
    warmup: int = 3,
    seed: int = 0,
    compile: bool = False,
    clock: str = "auto",
) -> Measurement:
    """Run ``graph`` in PyTorch and measure its latency and peak memory.

    Args:
        graph: The graph (every op lowers except ``opaque``; see `rewrite.measurement.lower`).
        device: A torch device; None: CUDA when present, else the CPU.
        inputs: Arrays or tensors for the graph inputs, by name or in order (default: seeded
            random ones, token ids below the vocabulary size). Weights are always seeded random.
        repeats: Timed runs.
        warmup: Untimed runs first (caches, allocator, lazy init, compilation).
        seed: Seed of the random inputs, weights and bootstrap.
        compile: Time the graph compiled whole by ``torch.compile`` (Inductor), as a module with
            the random weights (`rewrite.to_module`); the warm-up calls include the compilation.
            The peak memory is then CUDA's measured peak, or on a CPU the eager program's
            (Inductor's buffer reuse is not observed there).
        clock: ``"auto"`` (CUDA events; CPU time with one CPU thread; else wall) or ``"wall"``.

    Returns:
        A `Measurement`.

    Raises:
        MeasureError: On an unlowerable node, bad inputs, bad counts or a missing CUDA device.
    """
    import torch

    _check_counts(repeats, warmup)
    dev = torch_device(device)
    clk = _clock(dev, clock)
    program = lower(graph, dev)
    args, params = _bind(graph, dev, inputs, seed)
    with torch.inference_mode():
        if compile:
            run = _compiled(graph, args, params)
            times, cpu = _time_runs(run, dev, warmup, repeats)
            peak = _peak_memory(program, args, params, dev, run)
        else:
            times, cpu = _time_runs(lambda: program.run(args, params), dev, warmup, repeats)
            peak = _peak_memory(program, args, params, dev)
    return _measurement(times, cpu, clk, dev, peak, compile, seed)


@dataclass(frozen=True)
class NodeTimes:
    """Median seconds of every node of a graph run step by step (see `node_times`).

    Attributes:
        kernel: Node id -> seconds of the node's work: on a CPU the whole step (its dispatch
            included); on CUDA the device's time alone (CUDA events around a launch queued
            behind a spin kernel, so the host's launch work is not counted).
        host: Node id -> seconds the host spends issuing the node (CUDA only; empty on a CPU,
            where the host's work is in ``kernel``).
    """

    kernel: dict[int, float]
    host: dict[int, float]


def node_times(
    graph: Graph,
    device: Any = None,
    *,
    repeats: int = 10,
    warmup: int = 2,
    seed: int = 0,
    clock: str = "auto",
    statistic: str = "median",
) -> NodeTimes:
    """Time every node of ``graph`` on its own, step by step (what `rewrite.calibrate` fits).

    On a CPU each step is timed from the end of the previous one, so a node's time includes its
    dispatch. On CUDA the device is synchronized before each node and held by a spin kernel
    (``torch.cuda._sleep``) longer than the host needs to issue the node, with CUDA events
    recorded around the node's launches: the events time the node's kernels alone, and the host's
    wall time to issue them is kept apart (`NodeTimes.host`). Sources take no time and are left
    out.

    Args:
        graph: The graph.
        device: As for `measure`.
        repeats: Timed runs of the whole graph.
        warmup: Untimed runs first.
        seed: Seed of the random inputs and weights.
        clock: As for `measure` (on a CPU).
        statistic: ``"median"`` of each node's timed runs, or ``"min"`` (the run least
            disturbed by other processes on a shared machine).

    Returns:
        `NodeTimes` for every node that is not an ``input``, ``param`` or ``const``.
    """
    import torch

    _check_counts(repeats, warmup)
    dev = torch_device(device)
    program = lower(graph, dev)
    args, params = _bind(graph, dev, None, seed)
    timer = _CudaSteps(program, dev) if dev.type == "cuda" else _HostSteps(program, dev, clock)
    with torch.inference_mode():
        for r in range(warmup + repeats):
            timer.run(args, params, keep=r >= warmup)
    stat = STATISTICS[statistic]
    return NodeTimes(
        {nid: float(stat(ts)) for nid, ts in timer.kernel.items()},
        {nid: float(stat(ts)) for nid, ts in timer.host.items()},
    )


def _timed(node: Node) -> bool:
    return node.op not in ("input", "param", "const")


class _HostSteps:
    """Step times on the host's clock, each from the end of the previous step."""

    def __init__(self, program: Program, dev: Any, clock: str) -> None:
        self.program = program
        self.now = time.process_time if _clock(dev, clock) == "cpu" else time.perf_counter
        self.kernel: dict[int, list[float]] = {}
        self.host: dict[int, list[float]] = {}

    def run(self, args: list[Any], params: dict[str, Any], keep: bool) -> None:
        last = self.now()

        def hook(i: int, node: Node, env: list[tuple[Any, ...] | None]) -> None:
            nonlocal last
            t = self.now()
            if keep and _timed(node):
                self.kernel.setdefault(node.id, []).append(t - last)
            last = self.now()

        self.program.run(args, params, hook)


class _CudaSteps:
    """Device time of each step's kernels (events behind a spin kernel) and its host time."""

    #: Spin this many times the step's last host time, plus `SPIN_MARGIN` seconds.
    SPIN_FACTOR, SPIN_MARGIN = 3.0, 50e-6

    def __init__(self, program: Program, dev: Any) -> None:
        self.program, self.dev = program, dev
        self.cycles = _spin_cycles_per_second(dev)
        self.last_host = {i: 200e-6 for i, step in enumerate(program.steps) if _timed(step.node)}
        self.kernel: dict[int, list[float]] = {}
        self.host: dict[int, list[float]] = {}

    def run(self, args: list[Any], params: dict[str, Any], keep: bool) -> None:
        import torch

        steps, events = self.program.steps, {}
        t0 = 0.0

        def start(i: int) -> None:
            nonlocal t0
            if i not in self.last_host:
                return
            torch.cuda.synchronize(self.dev)
            spin = self.SPIN_FACTOR * self.last_host[i] + self.SPIN_MARGIN
            torch.cuda._sleep(int(spin * self.cycles))
            events[i] = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[i][0].record()
            t0 = time.perf_counter()

        def hook(i: int, node: Node, env: list[tuple[Any, ...] | None]) -> None:
            if i in events:
                self.last_host[i] = host = time.perf_counter() - t0
                events[i][1].record()
                if keep:
                    self.host.setdefault(node.id, []).append(host)
            if i + 1 < len(steps):
                start(i + 1)

        start(0)
        self.program.run(args, params, hook)
        torch.cuda.synchronize(self.dev)
        if keep:
            for i, (a, b) in events.items():
                self.kernel.setdefault(steps[i].node.id, []).append(a.elapsed_time(b) / 1e3)


def _spin_cycles_per_second(dev: Any) -> float:
    """Clock cycles per second of ``torch.cuda._sleep`` on ``dev``, read after a warm-up spin
    (so the clock has left its idle level)."""
    import torch

    torch.cuda._sleep(20_000_000)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(2_000_000)
    b.record()
    torch.cuda.synchronize(dev)
    return 2_000_000 / (a.elapsed_time(b) / 1e3)
