"""The PyTorch call of every IR op: the one table that both lowerings read.

`torch_call(op, args, attrs, shapes)` says which PyTorch function computes an op and with which
arguments, as a `TorchCall` ``(fn, args, kwargs)``. The arguments may be tensors (the timing
program of `rewrite.measurement.lower` calls ``fn`` at once) or ``torch.fx`` nodes (`to_module`
emits ``fn`` as a node of a ``GraphModule``), so the semantics of the IR in PyTorch are written
once. Wherever PyTorch has a function with the op's meaning it is called directly, so emitted
modules read as ordinary PyTorch code and export with ``torch.export``; the few ops PyTorch has no
single function for (attention with both a mask and causality, reductions over no dimension,
collectives run on one device) call the small functions defined here, which are plain
PyTorch too.

Kernels match what the cost model charges for: ``permute`` and ``transpose`` materialize a copy
(``permute_copy``), ``sdpa`` is PyTorch's fused attention, views stay views, and a fused
convolution with its epilogue (`rewrite.epilogue`) is one oneDNN call on a CPU
(`conv_epilogue_call`), as the cost model charges it on a profile with ``fused_epilogues``.

The op's meaning is the registry's (`rewrite.ops`); the tests check every entry against the
numpy reference (`rewrite.evaluate`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.epilogue import ConvEpilogue
from rewrite.ir import Node
from rewrite.ops import BINARY_OPS, UNARY_OPS

__all__ = [
    "SCALAR_OPS",
    "TorchCall",
    "conv_epilogue_call",
    "conv_with_epilogue",
    "has_torch_call",
    "scalar_operand",
    "torch_call",
    "torch_dtype",
    "torch_ops",
]

Shapes = Sequence[tuple[int, ...]]
Spec = Callable[[Sequence[Any], Mapping[str, Any], Shapes], "TorchCall"]

# Element-wise ops whose torch function has the op's name; the others are listed in the table.
_SAME_NAME = frozenset(UNARY_OPS + BINARY_OPS) - {"silu", "gelu", "cast", "div"}


@dataclass(frozen=True)
class TorchCall:
    """One PyTorch call: ``fn(*args, **kwargs)``.

    Attributes:
        fn: A PyTorch function (or one of this module's helpers).
        args: Positional arguments: the op's inputs (tensors or fx nodes) and static values.
        kwargs: Keyword arguments (static values).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> tuple[Any, ...]:
        """Run the call on tensors; always a tuple of outputs."""
        out = self.fn(*self.args, **self.kwargs)
        return tuple(out) if isinstance(out, tuple | list) else (out,)


def torch_dtype(dtype: str) -> Any:
    """The torch dtype of an IR dtype name (``"float32"`` -> ``torch.float32``)."""
    import torch

    return getattr(torch, dtype)


# ---------------------------------------------------------------- helpers (plain PyTorch)
def sdpa_masked_causal(
    q: Any, k: Any, v: Any, mask: Any, *, scale: float | None, enable_gqa: bool
) -> Any:
    """Attention with both a mask and causality: PyTorch takes one or the other, so causality is
    folded into the mask (``q``: ``... x L x E``, ``k``: ``... x S x E``, ``mask``
    broadcastable to ``... x L x S``)."""
    import torch
    import torch.nn.functional as F

    L, S = q.shape[-2], k.shape[-2]
    tri = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    mask = mask & tri if mask.dtype == torch.bool else mask.masked_fill(~tri, float("-inf"))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
    )


def chunk_or_repeat(x: Any, n: int, dim: int) -> tuple[Any, ...]:
    """``n`` equal pieces of ``x`` along ``dim`` (``n`` copies of an empty ``x``)."""
    return tuple(x.chunk(n, dim=dim)) if x.shape[dim] else (x,) * n


def assume(x: Any, domain: str) -> Any:
    """An ``assume`` node: its input (the promise is the caller's)."""
    return x


def sum_of(*xs: Any) -> Any:
    """The element-wise sum of equally shaped tensors (an all-reduce run on one device)."""
    import torch

    return torch.stack(xs).sum(0) if len(xs) > 1 else xs[0]


def reduce_scatter(*xs: Any, dim: int) -> tuple[Any, ...]:
    """The sum of ``xs`` cut in ``len(xs)`` pieces along ``dim``."""
    return chunk_or_repeat(sum_of(*xs), len(xs), dim)


#: oneDNN's names of the activations of `rewrite.epilogue.ACTIVATIONS`.
_ONEDNN_ACTIVATIONS = {
    "relu": "relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "silu": "swish",
    "gelu": "gelu",
}


def conv_with_epilogue(
    x: Any,
    w: Any,
    b: Any,
    residual: Any,
    *,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    activation: str | None,
    approximate: str = "none",
) -> Any:
    """``activation(conv2d(x, w, b) + residual)`` (``residual`` and ``activation`` may be None)
    in one oneDNN call on a CPU with float32 tensors (the add and the activation applied to each
    output tile as it is written, "post-ops"), else as the separate PyTorch calls. Traced by
    ``torch.compile`` or ``torch.export`` it is always the separate calls: a compiler fuses them
    itself, and an exported program holds only standard ops."""
    import torch
    import torch.nn.functional as F

    if (
        x.device.type == "cpu"
        and not torch.compiler.is_compiling()  # traced: the plain calls, for any compiler
        and torch.backends.mkldnn.is_available()
        and all(t is None or t.dtype == torch.float32 for t in (x, w, b, residual))
    ):
        conv = torch.ops.mkldnn._convolution_pointwise
        args = (list(padding), list(stride), list(dilation), groups)
        unary = _ONEDNN_ACTIVATIONS[activation] if activation else "none"
        algorithm = approximate if activation == "gelu" else ""
        if residual is None:
            return conv(x, w, b, *args, unary, [], algorithm)
        return conv.binary(
            x, residual, w, b, *args, "add", None, unary if activation else None, [], algorithm
        )
    y = F.conv2d(x, w, b, stride, padding, dilation, groups)
    if residual is not None:
        y = y + residual
    if activation == "gelu":
        return F.gelu(y, approximate=approximate)
    return getattr(F, activation)(y) if activation else y


def conv_epilogue_call(ep: ConvEpilogue, args: Sequence[Any]) -> TorchCall:
    """The call computing a fused group of the form `ep` from the group's inputs ``args``."""
    at = ep.conv_attrs

    def arg(i: int | None) -> Any:
        return None if i is None else args[i]

    return TorchCall(
        conv_with_epilogue,
        (arg(ep.x), arg(ep.w), arg(ep.b), arg(ep.residual)),
        {
            "stride": tuple(at["stride"]),
            "padding": tuple(at["padding"]),
            "dilation": tuple(at["dilation"]),
            "groups": at["groups"],
            "activation": ep.activation,
            "approximate": ep.activation_attrs.get("approximate", "none"),
        },
    )


# ---------------------------------------------------------------- the table
def _reduce(fn: str) -> Spec:
    def spec(a: Sequence[Any], at: Mapping[str, Any], shapes: Shapes) -> TorchCall:
        import torch

        dims = at["dims"]
        if dims is None:
            dims = tuple(range(len(shapes[0])))
        if not dims:  # numpy reduces over no axis: the identity
            return TorchCall(torch.clone, (a[0],))
        return TorchCall(
            getattr(torch, fn), (a[0],), {"dim": tuple(dims), "keepdim": at["keepdim"]}
        )

    return spec


def _sdpa(a: Sequence[Any], at: Mapping[str, Any], shapes: Shapes) -> TorchCall:
    import torch.nn.functional as F

    kw = {"scale": at["scale"], "enable_gqa": at["enable_gqa"]}
    if at["is_causal"] and len(a) == 4:
        return TorchCall(sdpa_masked_causal, tuple(a), kw)
    mask = {"attn_mask": a[3]} if len(a) == 4 else {}
    causal = {"is_causal": True} if at["is_causal"] else {}
    return TorchCall(F.scaled_dot_product_attention, tuple(a[:3]), {**mask, **causal, **kw})


def _opt(a: Sequence[Any], i: int) -> Any:
    return a[i] if len(a) > i else None


def _call(fn: Callable[..., Any]) -> Spec:
    """Spec of an op whose torch function takes the op's inputs and nothing else."""
    return lambda a, at, shapes: TorchCall(fn, tuple(a))


#: Python's operator of the arithmetic ops whose torch function needs a tensor first: a Python
#: number in front (a scalar constant `to_module` inlined) is computed by the operator instead.
_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
}


def _arith(name: str, fn: Callable[..., Any]) -> Spec:
    """Spec of an arithmetic op that may read a Python number (`SCALAR_OPS`)."""
    op = _OPERATORS[name]

    def spec(a: Sequence[Any], at: Mapping[str, Any], shapes: Shapes) -> TorchCall:
        return TorchCall(op if isinstance(a[0], int | float) else fn, tuple(a))

    return spec


#: Ops that accept a Python number for an input (`to_module` inlines 0-d constants there, so a
#: compiler sees ``x * 2.0``, not a read of a 0-d tensor it cannot specialize on).
SCALAR_OPS = frozenset(_OPERATORS)


def scalar_operand(op: str, src: Node) -> int | float | None:
    """The Python number an ``op`` node reads from ``src`` when ``op`` is arithmetic
    (`SCALAR_OPS`) and ``src`` a 0-d numeric constant, else None.

    Both lowerings pass that number, not a 0-d tensor: a compiler specializes ``x ** 2``, and
    eager PyTorch runs ``torch.pow(x, 3.0)`` 8-30x faster than ``torch.pow(x, tensor(3.0))`` on a
    CPU (a measured eager graph would otherwise be slower than the model it came from).
    """
    if op not in SCALAR_OPS or src.op != "const" or src.types[0].rank != 0:
        return None
    import numpy as np

    value = np.asarray(src.attrs["value"].array).item()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _build_table() -> dict[str, Spec]:
    import torch
    import torch.nn.functional as F

    t: dict[str, Spec] = {name: _call(getattr(torch, name)) for name in _SAME_NAME}
    t |= {name: _arith(name, getattr(torch, name)) for name in ("add", "sub", "mul", "pow")}
    t |= {
        "silu": _call(F.silu),
        "gelu": lambda a, at, s: TorchCall(F.gelu, (a[0],), {"approximate": at["approximate"]}),
        "cast": lambda a, at, s: TorchCall(torch.Tensor.to, (a[0], torch_dtype(at["dtype"]))),
        "div": _arith("div", torch.true_divide),
        "where": _call(torch.where),
        "mm": _call(torch.mm),
        "bmm": _call(torch.bmm),
        "matmul": _call(torch.matmul),
        "linear": _call(F.linear),
        "addmm": _call(torch.addmm),
        "sdpa": _sdpa,
        "conv2d": lambda a, at, s: TorchCall(
            F.conv2d,
            (a[0], a[1], _opt(a, 2), at["stride"], at["padding"], at["dilation"], at["groups"]),
        ),
        "max_pool2d": lambda a, at, s: TorchCall(
            F.max_pool2d, (a[0], at["kernel"], at["stride"], at["padding"])
        ),
        "avg_pool2d": lambda a, at, s: TorchCall(
            F.avg_pool2d,
            (a[0], at["kernel"], at["stride"], at["padding"]),
            {"count_include_pad": True},
        ),
        "sum": _reduce("sum"),
        "mean": _reduce("mean"),
        "amax": _reduce("amax"),
        "amin": _reduce("amin"),
        "softmax": lambda a, at, s: TorchCall(torch.softmax, (a[0], at["dim"])),
        "log_softmax": lambda a, at, s: TorchCall(torch.log_softmax, (a[0], at["dim"])),
        "layer_norm": lambda a, at, s: TorchCall(
            F.layer_norm,
            (a[0], tuple(at["normalized_shape"]), _opt(a, 1), _opt(a, 2)),
            {"eps": at["eps"]},
        ),
        "rms_norm": lambda a, at, s: TorchCall(
            F.rms_norm, (a[0], tuple(at["normalized_shape"]), _opt(a, 1)), {"eps": at["eps"]}
        ),
        "batch_norm": lambda a, at, s: TorchCall(
            F.batch_norm, (a[0], a[3], a[4], a[1], a[2]), {"training": False, "eps": at["eps"]}
        ),
        "reshape": lambda a, at, s: TorchCall(torch.reshape, (a[0], tuple(at["shape"]))),
        "expand": lambda a, at, s: TorchCall(torch.Tensor.expand, (a[0], tuple(at["shape"]))),
        "slice": lambda a, at, s: TorchCall(
            operator.getitem,
            (
                a[0],
                (slice(None),) * at["dim"] + (slice(at["start"], at["end"], at["step"]),),
            ),
        ),
        "split": lambda a, at, s: TorchCall(
            torch.split, (a[0], list(at["sizes"])), {"dim": at["dim"]}
        ),
        "assume": lambda a, at, s: TorchCall(assume, (a[0], at["domain"])),
        "diagonal": lambda a, at, s: TorchCall(
            torch.diagonal, (a[0], at["offset"], at["dim1"], at["dim2"])
        ),
        "permute": lambda a, at, s: TorchCall(torch.permute_copy, (a[0], tuple(at["dims"]))),
        "transpose": lambda a, at, s: TorchCall(
            torch.transpose_copy, (a[0], at["dim0"], at["dim1"])
        ),
        "concat": lambda a, at, s: TorchCall(torch.cat, (list(a),), {"dim": at["dim"]}),
        "index_select": lambda a, at, s: TorchCall(torch.index_select, (a[0], at["dim"], a[1])),
        "embedding": lambda a, at, s: TorchCall(F.embedding, (a[1], a[0])),
        "shard": lambda a, at, s: TorchCall(chunk_or_repeat, (a[0], at["n"], at["dim"])),
        "all_reduce": _call(sum_of),
        "all_gather": lambda a, at, s: TorchCall(torch.cat, (list(a),), {"dim": at["dim"]}),
        "reduce_scatter": lambda a, at, s: TorchCall(reduce_scatter, tuple(a), {"dim": at["dim"]}),
    }
    return t


_TABLE: dict[str, Spec] | None = None


def _table() -> dict[str, Spec]:
    global _TABLE
    if _TABLE is None:
        _TABLE = _build_table()
    return _TABLE


def torch_ops() -> frozenset[str]:
    """Names of the ops with a PyTorch call in the table."""
    return frozenset(_table())


def has_torch_call(op: str) -> bool:
    """Whether ``op`` has a PyTorch call in the table."""
    return op in _table()


def torch_call(op: str, args: Sequence[Any], attrs: Mapping[str, Any], shapes: Shapes) -> TorchCall:
    """The PyTorch call computing ``op``.

    Args:
        op: An op name with a table entry (`has_torch_call`).
        args: The op's inputs: tensors, or ``torch.fx`` nodes standing for them.
        attrs: The node's attributes.
        shapes: The input shapes (read where the call depends on a rank or a size).

    Returns:
        The `TorchCall`.

    Raises:
        KeyError: If ``op`` has no entry.
    """
    return _table()[op](args, attrs, shapes)
