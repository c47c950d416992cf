"""Fit a device profile's free constants to measurements of zoo graphs.

`calibrate(device)` builds each workload (a zoo model name, or a `Graph`) at each shape, times
every node on its own and the whole graph (`rewrite.measurement.node_times`, `measure`), and fits
the constants of the cost model's roofline (`rewrite.costmodel.kernel_time`, the one formula):

* the peaks: a GEMM, a large copy and an element-wise ``tanh`` are timed first and set the
  matmul and vector FLOP/s and the bandwidth (other dtypes keep the base profile's ratios to
  float32; on a GPU the vector peak is the base profile's, since an element-wise kernel there is
  bound by memory); a fitted efficiency above 1 raises the peak instead, so efficiencies stay in
  (0, 1];
* on a CPU, ``element_time``: every element-wise op timed alone at two sizes
  (`rewrite.measurement.peaks.measure_element_times`), its seconds per element; the roofline's compute term of such an op
  is that times its elements (`rewrite.devices`), since per-element costs differ by op far
  more than any FLOP count says (``tanh`` ~12x ``add``);
* the per-kernel constant (``launch_overhead`` on a CPU, ``device_overhead`` on CUDA),
  ``efficiency`` (``matmul``, ``vector``, ``memory``) and
  ``family_efficiency`` for every op family with at least `MIN_FAMILY_SAMPLES` kernels (the
  ``matmul`` and ``elementwise`` families are the references, fixed at 1): robust least squares
  (``scipy.optimize.least_squares``, soft-L1 loss) on the log error of every kernel's time and of
  every whole graph's latency (weighted `GRAPH_WEIGHT`);
* ``matmul_tile``: the base profile's, or a smaller one of `tile_candidates` when it fits the
  data better by `TILE_MARGIN` (a GPU library runs small products on smaller tiles; data
  without a dimension under the base tile cannot tell them apart and keeps the base's);
* ``view_overhead``: the median time of the view nodes;
* ``fusion``: ``"eager"``, since the measurements run fused groups op by op (eager PyTorch); with
  ``compile=True``, ``"compiled"``: the whole graphs are timed compiled by ``torch.compile``
  (Inductor) and fitted as the cost model charges a compiled graph (`rewrite.cost`: library
  kernels, the `rewrite.costmodel.EXTERN_FAMILIES`, as timed alone; every other kernel generated and
  fused, its arithmetic only; views free), while every kernel's own time is still the one
  timed alone, eagerly, which pins down the efficiencies;
* ``dispatch``: ``"serial"`` on a CPU; ``"async"`` on CUDA, where the host queues launches while
  the device runs: there the kernel times are the device's alone, ``launch_overhead`` and
  ``view_overhead`` are the median host times to issue a kernel node and a view, and a whole
  graph's latency is fitted as ``max(host, device)`` (`rewrite.cost`).

The result is a `DeviceProfile` (``format_version`` 3) whose ``provenance`` names the device,
driver, torch version, date, CPU count, threads, load average, workloads, shapes, seed and the fit
quality; `write_profile` stores it, and ``cost(graph, "profile.json")`` loads it. Communication
constants are kept from the base profile (no multi-device measurement here).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rewrite.costmodel import EXTERN_FAMILIES, kernel_terms, kernel_time
from rewrite.devices import DeviceProfile, load_device
from rewrite.errors import MeasureError
from rewrite.ir import Graph
from rewrite.measurement.peaks import measure_element_times, measure_peaks
from rewrite.measurement.timing import STATISTICS, measure, node_times, torch_device
from rewrite.ops import get_op

__all__ = [
    "DEFAULT_SHAPES",
    "DEFAULT_WORKLOADS",
    "Calibration",
    "Sample",
    "calibrate",
    "collect",
    "datasheet_profile",
    "device_name",
    "fit_profile",
    "merge_samples",
    "write_profile",
    "zoo_overrides",
]

#: Zoo models measured by default (their ``small`` sizes).
DEFAULT_WORKLOADS = ("gpt2", "bert", "llama", "t5", "vit", "resnet")
#: Shapes measured by default: ``batch`` with ``seq_len`` (token models) or ``image_size``.
DEFAULT_SHAPES: tuple[dict[str, int], ...] = (
    {"batch": 1, "seq_len": 16, "image_size": 32},
    {"batch": 4, "seq_len": 64, "image_size": 64},
    {"batch": 8, "seq_len": 128, "image_size": 96},
)
#: Fewest kernels of a family for it to get its own ``family_efficiency``.
MIN_FAMILY_SAMPLES = 2
#: Weight of a whole graph's log error against one kernel's.
GRAPH_WEIGHT = 4.0
#: Share of the fit's loss a smaller GEMM tile must save to replace the base profile's.
TILE_MARGIN = 0.02
_REFERENCE_FAMILIES = ("matmul", "elementwise")


@dataclass(frozen=True)
class Sample:
    """One measured graph.

    Attributes:
        name: Workload and shape, e.g. ``"gpt2 batch=1 seq_len=16"``.
        graph: The graph.
        latency: Its measured median latency, seconds.
        node_times: Node id -> median seconds of that node alone (on CUDA: the device's).
        host_times: Node id -> median seconds the host takes to issue it (CUDA only).
    """

    name: str
    graph: Graph
    latency: float
    node_times: Mapping[int, float]
    host_times: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` returns: the fitted profile and the measurements it was fitted to."""

    profile: DeviceProfile
    samples: list[Sample] = field(default_factory=list)
    path: Path | None = None


def zoo_overrides(name: str, shape: Mapping[str, int]) -> dict[str, int]:
    """The entries of ``shape`` that apply to zoo model ``name`` (``seq_len`` for token models,
    ``image_size`` for image models, and the rest)."""
    from rewrite import zoo

    drop = "image_size" if zoo.input_kind(name) == "tokens" else "seq_len"
    return {k: v for k, v in shape.items() if k != drop}


def collect(
    workloads: Sequence[str | Graph] = DEFAULT_WORKLOADS,
    shapes: Sequence[Mapping[str, int]] = DEFAULT_SHAPES,
    device: Any = None,
    *,
    repeats: int = 10,
    seed: int = 0,
    compile: bool = False,
    statistic: str = "median",
) -> list[Sample]:
    """Measure every workload at every shape (a `Graph` workload is measured once, as is).

    Every kernel is timed alone (eagerly); the whole graph eagerly, or compiled by
    ``torch.compile`` with ``compile``; each summarized by ``statistic`` over its timed runs
    (`rewrite.measurement.timing.STATISTICS`).

    Returns:
        One `Sample` per measured graph.
    """
    from rewrite import zoo

    samples = []
    for w in workloads:
        if isinstance(w, Graph):
            jobs = [(w.name, w)]
        else:
            jobs = []
            for shape in shapes:
                kw = zoo_overrides(w, shape)
                label = " ".join([w, *(f"{k}={v}" for k, v in kw.items())])
                jobs.append((label, zoo.build(w, **kw)))
        for label, g in jobs:
            nodes = node_times(g, device, repeats=repeats, seed=seed, statistic=statistic)
            m = measure(g, device, repeats=repeats, seed=seed, compile=compile)
            latency = STATISTICS[statistic](m.times)
            samples.append(Sample(label, g, latency, nodes.kernel, nodes.host))
    return samples


def merge_samples(rounds: Sequence[Sequence[Sample]], statistic: str = "median") -> list[Sample]:
    """One sample per graph from several rounds of `collect`: ``statistic`` (the median or the
    minimum) of its latencies and, per node, of its times (the first round's graph and order)."""
    stat = STATISTICS[statistic]
    first = rounds[0]
    if len(rounds) == 1:
        return list(first)
    out = []
    for i, smp in enumerate(first):
        same = [r[i] for r in rounds]

        def med(field: str, smp: Sample = smp, same: list[Sample] = same) -> dict[int, float]:
            return {k: stat([getattr(s, field)[k] for s in same]) for k in getattr(smp, field)}

        latency = stat([s.latency for s in same])
        out.append(Sample(smp.name, smp.graph, latency, med("node_times"), med("host_times")))
    return out


def _with_peaks(base: DeviceProfile, peaks: Mapping[str, float]) -> DeviceProfile:
    """``base`` with the measured peaks (a unit not measured keeps the base's)."""
    table = {
        unit: {dt: peaks.get(unit, t["float32"]) * v / t["float32"] for dt, v in t.items()}
        for unit, t in base.peak_flops.items()
    }
    return replace(base, peak_flops=table, memory_bandwidth=peaks["memory_bandwidth"])


@dataclass
class _Data:
    unit: np.ndarray  # kernel -> 0 matmul, 1 vector
    extern: np.ndarray  # kernel -> whether a compiler calls a library kernel for it
    fam: np.ndarray  # kernel -> index into families (-1: reference family)
    work: np.ndarray
    nbytes: np.ndarray
    t: np.ndarray
    graph: np.ndarray  # kernel -> sample index
    views: np.ndarray  # sample -> number of view nodes
    view_times: list[float]  # per view node: its step time (serial) or host time (async)
    launch_times: list[float]  # per kernel node: its host time (async only)
    latency: np.ndarray  # sample -> measured seconds

    @property
    def kernels(self) -> np.ndarray:
        """Sample -> number of kernel nodes."""
        return np.bincount(self.graph, minlength=len(self.latency)).astype(np.float64)


def _gather(samples: Sequence[Sample], ref: DeviceProfile) -> tuple[_Data, list[str]]:
    rows: list[tuple[str, str, float, int, float, int]] = []  # unit, family, work, bytes, t, i
    views: list[int] = []
    view_times: list[float] = []
    launch_times: list[float] = []
    counts: dict[str, int] = {}
    for si, s in enumerate(samples):
        nv = 0
        for nid, t in s.node_times.items():
            node = s.graph.node(nid)
            kind = get_op(node.op).kind
            host = s.host_times.get(nid)
            if kind == "view":
                nv += 1
                view_times.append(t if host is None else host)
            elif kind != "source":
                unit, family, work, _, nbytes = kernel_terms(node, ref)
                rows.append((unit, family, work, nbytes, t, si))
                counts[family] = counts.get(family, 0) + 1
                if host is not None:
                    launch_times.append(host)
        views.append(nv)
    if not rows:
        raise MeasureError("calibration needs measured kernels, but the samples have none.")
    families = sorted(
        f for f, c in counts.items() if c >= MIN_FAMILY_SAMPLES and f not in _REFERENCE_FAMILIES
    )
    fidx = {f: i for i, f in enumerate(families)}
    data = _Data(
        unit=np.array([r[0] == "vector" for r in rows], dtype=np.int64),
        extern=np.array([r[1] in EXTERN_FAMILIES for r in rows]),
        fam=np.array([fidx.get(r[1], -1) for r in rows], dtype=np.int64),
        work=np.array([r[2] for r in rows]),
        nbytes=np.array([r[3] for r in rows], dtype=np.float64),
        t=np.maximum(np.array([r[4] for r in rows]), 1e-9),
        graph=np.array([r[5] for r in rows], dtype=np.int64),
        views=np.array(views, dtype=np.float64),
        view_times=view_times,
        launch_times=launch_times,
        latency=np.array([s.latency for s in samples]),
    )
    return data, families


def _predict(
    x: np.ndarray, d: _Data, bandwidth: float, launch: float
) -> tuple[np.ndarray, np.ndarray]:
    """Every kernel's time alone, and its arithmetic alone (what a compiled graph charges a
    generated kernel, `rewrite.cost`)."""
    eta_mm, eta_vec, eta_mem = np.exp(x[:3])
    fam = np.concatenate([np.exp(x[3:]), [1.0]])[d.fam]  # index -1: the reference, 1
    eta_c = np.where(d.unit == 0, eta_mm, eta_vec) * fam
    alone = kernel_time(d.work, d.nbytes, eta_c, eta_mem * fam, bandwidth, launch, np.maximum)
    return alone, d.work / eta_c


def _residuals(
    x: np.ndarray,
    d: _Data,
    bandwidth: float,
    view: float,
    host: np.ndarray | None,
    compiled: bool = False,
) -> np.ndarray:
    """Log errors of every kernel and (weighted) every graph. ``x``: the logs of the per-kernel
    constant (the launch overhead when serial, the device overhead when async), the three
    efficiencies and the family factors; ``host``: per sample, the host's seconds on an async
    device (a graph then takes the longer of its host and device times), None when serial;
    ``compiled``: the graphs' latencies are compiled ones (module docstring)."""
    pred, arithmetic = _predict(x[1:], d, bandwidth, float(np.exp(x[0])))
    charged = np.where(d.extern, pred, arithmetic) if compiled else pred
    device = np.bincount(d.graph, weights=charged, minlength=len(d.latency))
    if compiled:
        view = 0.0  # a compiled graph's views are free
    total = device + d.views * view if host is None else np.maximum(device, host)
    return np.concatenate(
        [np.log(pred / d.t), GRAPH_WEIGHT * np.log(np.maximum(total, 1e-12) / d.latency)]
    )


def fit_profile(
    samples: Sequence[Sample],
    base: DeviceProfile,
    peaks: Mapping[str, float],
    name: str,
    provenance: Mapping[str, Any] | None = None,
    *,
    compiled: bool = False,
) -> DeviceProfile:
    """Fit the free constants to ``samples`` (see the module docstring).

    Args:
        samples: Measured graphs (`collect`).
        base: Profile giving dtype ratios, memory capacity, tile and interconnect.
        peaks: Measured peaks (`measure_peaks`).
        name: Name of the new profile.
        provenance: Extra provenance entries.
        compiled: The samples' graph latencies were timed compiled (``collect(...,
            compile=True)``): fit a ``fusion="compiled"`` profile.

    Returns:
        The fitted `DeviceProfile`.
    """
    from scipy.optimize import least_squares

    # The kernels' terms under each candidate GEMM tile (the rest does not depend on it).
    data = {}
    for t in tile_candidates(base.matmul_tile):
        ref = _with_peaks(replace(base, matmul_tile=t), peaks)
        data[t] = (ref, *_gather(samples, ref))
    d = data[base.matmul_tile][1]
    dispatch = "async" if d.launch_times else "serial"
    view = float(np.median(d.view_times)) if d.view_times else 0.0
    host = None
    if dispatch == "async":  # launches are measured on the host; the device side is fitted
        launch = float(np.median(d.launch_times))
        # compiled: the library kernels' launches (a generated kernel's is not charged)
        kernels = np.bincount(d.graph, weights=d.extern, minlength=len(d.latency))
        host = kernels * launch if compiled else d.kernels * launch + d.views * view
    fits = {}
    for t, (ref, d, families) in data.items():
        x0 = np.log(
            [max(float(np.percentile(d.t, 10)), 1e-7), 0.5, 0.5, 0.5, *[1.0] * len(families)]
        )
        args = (d, ref.memory_bandwidth, view, host, compiled)
        fits[t] = least_squares(_residuals, x0, args=args, loss="soft_l1", f_scale=0.2)
    # The base profile's tile unless a smaller one fits clearly better (`TILE_MARGIN`).
    best = min(fits, key=lambda t: fits[t].cost)
    tile = (
        best
        if fits[best].cost < fits[base.matmul_tile].cost * (1 - TILE_MARGIN)
        else base.matmul_tile
    )
    (ref, d, families), sol = data[tile], fits[tile]
    args = (d, ref.memory_bandwidth, view, host, compiled)
    per_kernel, eta_mm, eta_vec, eta_mem = (float(v) for v in np.exp(sol.x[:4]))
    if dispatch == "serial":
        launch = per_kernel
    res = _residuals(sol.x, *args)
    n = len(d.t)
    etas = {"matmul": eta_mm, "vector": eta_vec}
    table = {
        unit: {dt: v * max(etas[unit], 1.0) for dt, v in t.items()}
        for unit, t in ref.peak_flops.items()
    }
    quality = {
        "kernels": n,
        "graphs": len(samples),
        "kernel_median_error_factor": float(np.exp(np.median(np.abs(res[:n])))),
        "graph_median_error_factor": float(np.exp(np.median(np.abs(res[n:] / GRAPH_WEIGHT)))),
        "measured_peaks": dict(peaks),
        "matmul_tile_losses": {"x".join(map(str, t)): float(f.cost) for t, f in fits.items()},
    }
    return replace(
        ref,
        name=name,
        aliases=(),
        description="measured and fitted by rewrite.measurement.calibrate on "
        + str((provenance or {}).get("device_name") or device_name(None)),
        peak_flops=table,
        memory_bandwidth=ref.memory_bandwidth * max(eta_mem, 1.0),
        launch_overhead=launch,
        view_overhead=0.0 if compiled else view,
        device_overhead=per_kernel if dispatch == "async" else 0.0,
        efficiency={
            "matmul": min(eta_mm, 1.0),
            "vector": min(eta_vec, 1.0),
            "memory": min(eta_mem, 1.0),
        },
        family_efficiency={f: float(np.exp(v)) for f, v in zip(families, sol.x[4:])},
        # the vector peak was raised by an efficiency above 1: the measured times go down alike
        element_time={k: v / max(eta_vec, 1.0) for k, v in ref.element_time.items()},
        # measured eagerly, a fused group runs its body op by op; compiled, it is generated
        fusion="compiled" if compiled else "eager",
        dispatch=dispatch,
        provenance={**(provenance or {}), "fit": quality},
    )


def tile_candidates(tile: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """The GEMM tiles a fit tries: the base profile's, then it halved and quartered (a GPU
    library picks smaller tiles for small products; `fit_profile` keeps the one that fits)."""
    out = [tile, *(tuple(max(1, d // f) for d in tile) for f in (2, 4))]
    return list(dict.fromkeys(out))  # type: ignore[arg-type]


def datasheet_profile(device: Any = None) -> str:
    """The built-in datasheet profile of a torch device: ``"cpu"``, or the GPU's by its name
    (``"h200"``, ``"h100"``, ``"a100"``; ``"h100"`` for another GPU)."""
    import torch

    dev = torch_device(device)
    if dev.type != "cuda":
        return "cpu"
    gpu = torch.cuda.get_device_name(dev).lower()
    return next((name for name in ("h200", "h100", "a100") if name in gpu), "h100")


def device_name(dev: Any) -> str:
    """The name of a torch device: the GPU's, or the CPU's model with its CPU count."""
    import torch

    if dev is not None and dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


def _provenance(
    dev: Any, workloads: Sequence[Any], shapes: Any, repeats: int, seed: int
) -> dict[str, Any]:
    import torch

    return {
        "device": str(dev),
        "device_name": device_name(dev),
        "driver": torch.version.cuda if dev.type == "cuda" else None,
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()),
        "workloads": [w if isinstance(w, str) else w.name for w in workloads],
        "shapes": [dict(s) for s in shapes],
        "repeats": repeats,
        "seed": seed,
    }


def _capacity(dev: Any) -> float:
    import torch

    if dev.type == "cuda":
        return float(torch.cuda.get_device_properties(dev).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def write_profile(profile: DeviceProfile, path: str | Path) -> Path:
    """Write ``profile`` as JSON to ``path`` atomically (temp file + rename)."""
    from rewrite.serialize import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, json.dumps(profile.to_dict(), indent=1) + "\n")


def calibrate(
    device: Any = None,
    workloads: Sequence[str | Graph] = DEFAULT_WORKLOADS,
    shapes: Sequence[Mapping[str, int]] = DEFAULT_SHAPES,
    *,
    base: str | Path | DeviceProfile | None = None,
    name: str | None = None,
    out: str | Path | None = None,
    repeats: int = 10,
    seed: int = 0,
    compile: bool = False,
    rounds: int = 1,
    on_round: Callable[[int], None] | None = None,
    statistic: str = "median",
) -> Calibration:
    """Measure ``workloads`` x ``shapes`` on ``device`` and fit a profile to them.

    Args:
        device: A torch device; None: CUDA when present, else the CPU.
        workloads: Zoo model names (their small sizes) or graphs.
        shapes: Dicts of ``batch``, ``seq_len`` (token models) and ``image_size`` (image
            models); a key that does not apply to a model is ignored.
        base: The profile to start from (default: `datasheet_profile` of the device).
        name: The new profile's name (default ``"<device type>-measured"``).
        out: Write the profile JSON here.
        repeats: Timed runs per graph.
        seed: Seed of the random inputs and weights.
        compile: Time the whole graphs compiled by ``torch.compile`` (Inductor) and fit a
            ``fusion="compiled"`` profile, the one to search with for a model that will be
            compiled (module docstring); every kernel is still timed alone, eagerly.
        rounds: Measure everything this many times, in turn, and fit the medians
            (`merge_samples`): on a shared machine a change of load then falls on every graph
            alike instead of on the graphs measured while it lasted.
        on_round: Called with the round's index after each round (a benchmark measures its
            held-out graphs there, in the same rounds).
        statistic: How the timed runs (and rounds) of a graph or kernel are summarized:
            ``"median"``, or ``"min"`` (`rewrite.measurement.timing.STATISTICS`).

    Returns:
        A `Calibration` (profile, samples, path written).

    Raises:
        MeasureError: On a missing device, workloads that give no kernels, or ``rounds < 1``.
    """
    dev = torch_device(device)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise MeasureError(f"rounds must be an int >= 1, but got {rounds!r}.")
    if statistic not in STATISTICS:
        raise MeasureError(f"statistic must be one of {sorted(STATISTICS)}, got {statistic!r}.")
    if not workloads or (not shapes and any(isinstance(w, str) for w in workloads)):
        raise MeasureError(
            f"calibrate needs workloads and shapes, but got workloads={workloads!r}, "
            f"shapes={shapes!r}; e.g. workloads=('gpt2',), shapes=({{'batch': 1, 'seq_len': 16}},)."
        )
    prof_base = load_device(base if base is not None else datasheet_profile(dev))
    prof_base = replace(prof_base, memory_capacity=_capacity(dev))
    peaks = measure_peaks(dev)
    prof_base = replace(prof_base, element_time=measure_element_times(dev))
    measured = []
    for r in range(rounds):
        measured.append(
            collect(
                workloads,
                shapes,
                dev,
                repeats=repeats,
                seed=seed,
                compile=compile,
                statistic=statistic,
            )
        )
        if on_round is not None:
            on_round(r)
    samples = merge_samples(measured, statistic)
    profile = fit_profile(
        samples,
        prof_base,
        peaks,
        name or f"{dev.type}-{'compiled' if compile else 'measured'}",
        {**_provenance(dev, workloads, shapes, repeats, seed), "compiled": compile},
        compiled=compile,
    )
    path = write_profile(profile, out) if out is not None else None
    return Calibration(profile, samples, path)
