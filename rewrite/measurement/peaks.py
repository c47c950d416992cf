"""What a device does at its best, measured by microbenchmarks for `rewrite.measurement.calibrate`.

* `measure_peaks`: the float32 GEMM FLOP/s, the copy bandwidth and (on a CPU) the ``tanh``
  FLOP/s: the roofline's peaks before the fit scales them.
* `measure_element_times`: on a CPU, every element-wise op's seconds per element (a profile's
  ``element_time``, `rewrite.devices`).

Importing this module does not import torch; its functions do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rewrite.measurement.timing import _time_runs, torch_device

__all__ = ["ELEMENT_SIZES", "measure_element_times", "measure_peaks"]


def _timeit(fn: Any, dev: Any, repeats: int = 7) -> float:
    """Median seconds of one call of ``fn``: on CUDA, CUDA events around 10 calls queued back
    to back (the device's time, not the launches')."""
    import torch

    fn()
    ts = []
    for _ in range(repeats):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            a.record()
            for _ in range(10):
                fn()
            b.record()
            torch.cuda.synchronize(dev)
            ts.append(a.elapsed_time(b) / 1e4)
        else:
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def measure_peaks(device: Any = None) -> dict[str, float]:
    """Achieved float32 GEMM FLOP/s and copy bandwidth on ``device``, and on a CPU the ``tanh``
    FLOP/s (on a GPU an element-wise kernel is bound by memory, so its FLOP/s say nothing of the
    vector peak: the base profile's is kept and the fit scales it).

    Returns:
        ``{"matmul": FLOP/s, "memory_bandwidth": bytes/s}``, and ``"vector"`` (FLOP/s) on a CPU.
    """
    import torch

    dev = torch_device(device)
    cuda = dev.type == "cuda"
    n = 4096 if cuda else 384
    a = torch.randn(n, n, device=dev)
    peaks = {"matmul": 2 * n**3 / _timeit(lambda: torch.mm(a, a), dev)}
    big = torch.empty(2**26 if cuda else 2**24, device=dev)
    dst = torch.empty_like(big)
    peaks["memory_bandwidth"] = 2 * big.numel() * 4 / _timeit(lambda: dst.copy_(big), dev)
    if not cuda:
        x = torch.randn(2**18, device=dev)
        peaks["vector"] = 4 * x.numel() / _timeit(lambda: torch.tanh(x, out=dst[: x.numel()]), dev)
    return peaks


#: Element counts of the two sizes `measure_element_times` times each op at (in cache).
ELEMENT_SIZES = (2**14, 2**18)


def measure_element_times(device: Any = None, repeats: int = 15) -> dict[str, float]:
    """Seconds per output element of every element-wise op (`rewrite.ops.UNARY_OPS`,
    ``BINARY_OPS`` and ``where``) at ``float32`` on a CPU, as the lowered program runs it
    (`rewrite.lowering.kernels`): the slope of its fastest time over `ELEMENT_SIZES`, so the
    per-call cost is left to the fitted launch overhead. A binary op that `rewrite.lowering`
    may pass a Python number (``SCALAR_OPS``) is timed that way too, as ``"<op>.scalar"`` (with
    ``3.0``: ``x ** 3.0`` is another kernel than ``x ** y``). The result is a profile's
    ``element_time`` (`rewrite.devices`).

    Returns:
        ``{op: seconds per element}``; empty on a GPU, where element-wise kernels are bound by
        memory and the roofline's bytes price them.
    """
    import torch

    from rewrite.lowering.kernels import SCALAR_OPS, has_torch_call, torch_call
    from rewrite.ops import BINARY_OPS, UNARY_OPS

    dev = torch_device(device)
    if dev.type != "cpu":
        return {}
    gen = torch.Generator().manual_seed(0)
    calls: dict[str, Callable[[int], tuple[Any, ...]]] = {}
    for op in (*UNARY_OPS, *BINARY_OPS, "where"):
        if op == "cast" or not has_torch_call(op):
            continue
        calls[op] = _element_args(op, gen)
        if op in SCALAR_OPS:
            calls[f"{op}.scalar"] = _with_number(calls[op])
    out = {}
    for key, make in calls.items():
        op = key.split(".")[0]
        times = []
        for n in ELEMENT_SIZES:
            args = make(n)
            call = torch_call(op, args, {"approximate": "none"} if op == "gelu" else {}, [])
            times.append(min(_time_runs(call, dev, 1, repeats)[0]))
        slope = (times[1] - times[0]) / (ELEMENT_SIZES[1] - ELEMENT_SIZES[0])
        out[key] = max(slope, 1e-12)
    return out


def _element_args(op: str, gen: Any) -> Callable[[int], tuple[Any, ...]]:
    """Inputs of ``n`` elements for element-wise ``op``: floats in [0.5, 1.5) (in every op's
    domain); for the logical ops and ``where``'s condition, masks in runs of 64 like the
    attention and padding masks of models (PyTorch's ``where`` takes ~6x longer on a random
    mask)."""
    import torch

    from rewrite.ops import UNARY_OPS

    def floats(n: int) -> Any:
        return torch.rand(n, generator=gen) + 0.5

    def mask(n: int, shift: int = 0) -> Any:
        return (torch.arange(n) + shift) % 128 < 64

    arity = 1 if op in UNARY_OPS else 2
    if op in ("logical_and", "logical_or", "logical_not"):
        return lambda n: tuple(mask(n, 32 * i) for i in range(arity))
    if op == "where":
        return lambda n: (mask(n), floats(n), floats(n))
    return lambda n: tuple(floats(n) for _ in range(arity))


def _with_number(
    make: Callable[[int], tuple[Any, ...]],
) -> Callable[[int], tuple[Any, ...]]:
    """``make``'s first input with the number 3.0 as the second (a binary op's scalar form)."""
    return lambda n: (make(n)[0], 3.0)
