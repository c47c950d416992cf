"""Finite-field semantics of the IR ops (exact random testing, after Mirage).

Float tensors hold elements of the field ``F_p`` with ``p = 1,048,343`` (a safe prime below
``2**20``) stored in float64, so a product of two elements is below ``2**40`` and a matrix product
is exact in float64 BLAS while its contraction is chunked to at most 8,192 terms (every partial
sum stays below ``2**53``); every other reduction sums reduced elements (each below ``2**20``), so
it is exact for any length up to ``2**33``. Integer and bool tensors keep their ordinary values
(indices, masks); a float to integer cast is a random map onto a wide signed range.

Linear and layout ops (add, mul, sums, reshape, concat, ...; `OpDef.field_exact`) run their numpy
reference implementation on field elements and reduce mod ``p``; matrix products, convolutions
and means have their own exact rules. Everything else has a field surrogate:

* unary non-linear ops (exp, tanh, gelu, relu, sqrt, ...; `OpDef.random_map`) are *consistent
  random maps*: a keyed pseudo-random function ``F_p -> F_p`` (splitmix64), the same for both
  graphs under test. That is sound for rules valid for every element-wise function. Surrogates
  keep the identities rules rely on: ``rsqrt = 1 / sqrt``,
  ``silu(x) = x * sigmoid(x)``, ``reciprocal`` and ``div`` use the true field inverse;
* softmax is ``E(x) / sum(E(x))``, layer/RMS/batch norm use the field mean, the ``sqrt`` map and
  the inverse, attention is ``softmax(q k^T * scale + mask) v``; ``maximum``/``minimum`` and
  ``amax``/``amin`` pick the largest or smallest element under one random total order of the
  field (so they agree with each other, as on the reals); comparisons are consistent random
  predicates;
* float constants map to the field by their exact dyadic value ``m * 2**e``
  (``m * inverse(2)**-e mod p``), so scalar algebra (``0.5 * 2 == 1``) stays exact; ``inf`` and
  ``nan`` map to fixed random elements.

False-accept bound: if the two graphs differ as polynomials of degree at most ``d`` in the random
inputs and map values, one test accepts with probability at most ``d / p`` (Schwartz-Zippel), and
``k`` independent tests at most ``(d / p) ** k``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rewrite.errors import VerificationError
from rewrite.ir import ConstArray, Graph, Node, numpy_dtype
from rewrite.ops import get_op, ops_where

__all__ = [
    "MAX_CHUNK",
    "PRIME",
    "SEMANTICS_VERSION",
    "FieldOps",
    "Semantics",
    "field_const",
    "random_elements",
    "run_body",
]

#: The field's prime: a safe prime below 2**20 (``(p - 1) / 2 = 524,171`` is prime too).
PRIME = 1_048_343
_INV_P = 1.0 / PRIME
#: Version of the field semantics; part of every cached verdict's key.
SEMANTICS_VERSION = 4  # 4: x ** -k is an inverse; max/min select under a random order
#: Longest contraction summed in one float64 product (``MAX_CHUNK * p**2 < 2**53``).
MAX_CHUNK = 8192

_FLOATS = ("bfloat16", "float16", "float32", "float64")
#: The field-exact ops `FieldOps._additive` computes without a division.
_ADDITIVE = frozenset({"add", "sub", "neg"})


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` is held as field elements."""
    return dtype in _FLOATS


class Semantics(Protocol):
    """What an evaluator needs from a semantics: an array namespace and a node runner."""

    @property
    def xp(self) -> Any:
        """The array namespace."""
        ...

    def run(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Outputs of ``node`` on ``args``."""
        ...


def run_body(sem: Semantics, body: Graph, args: Sequence[Any]) -> tuple[Any, ...]:
    """Evaluate a fused group's body on its input arrays (no memo)."""
    env: dict[int, tuple[Any, ...]] = dict(zip(body.inputs, ((a,) for a in args)))
    for node in body:
        if node.id in env:
            continue
        env[node.id] = sem.run(node, [env[v.node][v.index] for v in node.inputs])
    return tuple(env[v.node][v.index] for v in body.outputs)


@functools.cache
def _pow2_table() -> np.ndarray:
    inv2 = pow(2, PRIME - 2, PRIME)
    return np.array(
        [pow(inv2, -e, PRIME) if e < 0 else pow(2, e, PRIME) for e in range(-1200, 1200)],
        dtype=np.float64,
    )


def field_const(values: Any) -> np.ndarray:
    """Map float (or int/bool) values to field elements by their exact value.

    Args:
        values: A numpy array or scalar.

    Returns:
        A float64 array of field elements (same shape).
    """
    a = np.asarray(values)
    if a.dtype.kind in "biu":
        return np.mod(a.astype(np.int64), PRIME).astype(np.float64)
    a = a.astype(np.float64)
    finite = np.isfinite(a)
    mant, exp = np.frexp(np.where(finite, a, 0.0))
    m = np.rint(mant * 2.0**53).astype(np.int64)  # exact: a == m * 2**(exp - 53)
    out = np.mod(m, PRIME).astype(np.float64) * _pow2_table()[exp.astype(np.int64) - 53 + 1200]
    out = np.mod(out, PRIME)
    out = np.where(np.isposinf(a), 777_001.0, out)
    out = np.where(np.isneginf(a), 333_017.0, out)
    return np.where(np.isnan(a), 555_557.0, out)


class FieldOps:
    """Field semantics for one test: random maps and the op table.

    Args:
        xp: Array namespace (numpy or cupy).
        seed: Seed of this test's random maps (both graphs of a check use the same one).
    """

    def __init__(self, xp: Any, seed: int) -> None:
        self.xp, self.seed = xp, seed
        self._maps: dict[str, Any] = {}
        self._inv: Any = None

    # ------------------------------------------------------------------ primitives
    def mod(self, a: Any) -> Any:
        """``a mod p`` in ``[0, p)`` for float64 ``a`` with ``|a| < 2**53`` (exact).

        ``r = a - p * rint(a / p)`` lies in ``[-p/2 - 1, p/2 + 1]``: the quotient's rounding error
        is below ``2**-19``, so ``rint`` is off only next to a half-integer; one correction of
        the negative ones lands every element in ``[0, p)``. All products stay below ``2**53``,
        so this is exact and about twice as fast as ``xp.mod`` on float64.
        """
        xp = self.xp
        r = a - xp.rint(a * _INV_P) * PRIME
        return xp.where(r < 0, r + PRIME, r)

    def _additive(self, op: str, a: Sequence[Any]) -> Any:
        """add/sub/neg of reduced elements with one conditional correction (no division)."""
        xp = self.xp
        if op == "add":
            r = a[0] + a[1]
            return xp.where(r >= PRIME, r - PRIME, r)
        if op == "sub":
            r = a[0] - a[1]
            return xp.where(r < 0, r + PRIME, r)
        return xp.where(a[0] == 0, a[0], PRIME - a[0])

    def inv(self, a: Any) -> Any:
        """Field inverse (``0`` maps to ``0``)."""
        if self._inv is None:
            self._inv = self.xp.asarray(_inverse_table())
        return self._inv[a.astype(self.xp.int64)]

    def rmap(self, key: str, a: Any) -> Any:
        """The consistent random map named ``key`` applied to field elements ``a``.

        A keyed pseudo-random function (splitmix64 of the element and a key derived from
        ``key`` and the seed), reduced mod ``p``: the same element always maps to the same
        value within one test, and maps of different keys or seeds are independent.
        """
        k = self._maps.get(key)
        if k is None:
            k = self._maps[key] = _key64(f"{key}|{self.seed}")
        return prf(self.xp, k, a.astype(self.xp.uint64), PRIME)

    def matmul(self, a: Any, b: Any) -> Any:
        """Exact field matrix product (numpy ``matmul`` broadcasting), chunked along K."""
        k = a.shape[-1]
        if k <= MAX_CHUNK:
            return self.mod(self.xp.matmul(a, b))
        out = None
        for s in range(0, k, MAX_CHUNK):
            part = self.mod(self.xp.matmul(a[..., s : s + MAX_CHUNK], b[..., s : s + MAX_CHUNK, :]))
            out = part if out is None else self.mod(out + part)
        return out

    def to_field(self, a: Any) -> Any:
        """Bring a plain int/bool array into the field (exact integer ``mod p``)."""
        if a.dtype == self.xp.float64:
            return a
        return (a.astype(self.xp.int64) % PRIME).astype(self.xp.float64)

    def from_field(self, a: Any, dtype: str) -> Any:
        """A field array seen as a plain ``dtype`` array (casts to int/bool).

        A cast to an integer dtype is the random map ``to_int`` onto ``[-p/2, p/2)`` (wrapped to
        ``dtype``): values drawn from a small set would accept rules true only on that set.
        """
        return from_field(self, a, dtype)

    # ------------------------------------------------------------------ evaluation
    def run(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Outputs of ``node`` on field/plain ``args`` (non-source nodes only).

        Raises:
            VerificationError: For ops without field semantics (opaque nodes).
        """
        op, attrs = node.op, node.attrs
        out_float = [is_float(t.dtype) for t in node.types]
        if not any(out_float) and not any(is_float(t.dtype) for t in node.in_types):
            outs = get_op(op).impl(self.xp, list(args), attrs)  # plain int/bool computation
            return tuple(self.xp.asarray(o) for o in outs)
        fn = _SPECIAL.get(op)
        if fn is not None:
            return fn(self, node, args)
        if op in ops_where(random_map=True):
            key = f"{op}|{sorted(attrs.items())}"
            return (self.rmap(key, args[0]),)
        if op in ops_where(field_exact=True):
            args = [a if _index_arg(op, i) else self.to_field(a) for i, a in enumerate(args)]
            if op in _ADDITIVE:
                return (self._additive(op, args),)
            outs = get_op(op).impl(self.xp, args, attrs)
            if op in ops_where(layout=True):  # moves reduced elements around: no reduction needed
                return tuple(self.xp.asarray(o, dtype=self.xp.float64) for o in outs)
            return tuple(self.mod(self.xp.asarray(o, dtype=self.xp.float64)) for o in outs)
        raise VerificationError(
            f"op {op!r} has no finite-field semantics; check this graph in float mode "
            "(Verifier(mode='float')) or register field semantics in rewrite.verify.field."
        )


def from_field(f: Any, a: Any, dtype: str) -> Any:
    """``f.from_field`` for `FieldOps` and the batched semantics (which brings its own ``rmap``)."""
    xp = f.xp
    if dtype == "bool":
        return a != 0
    wide = f.rmap("to_int", a).astype(xp.int64) - PRIME // 2
    return wide.astype(numpy_dtype(dtype))


def _index_arg(op: str, i: int) -> bool:
    return (op in ("index_select", "embedding") and i == 1) or (op == "where" and i == 0)


@functools.cache
def _inverse_table() -> np.ndarray:
    x = np.arange(PRIME, dtype=np.int64)
    out = np.ones(PRIME, dtype=np.int64)
    base, e = x.copy(), PRIME - 2
    while e:
        if e & 1:
            out = out * base % PRIME
        base = base * base % PRIME
        e >>= 1
    out[0] = 0
    return out.astype(np.float64)


@functools.lru_cache(maxsize=4096)
def _key64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


_GOLDEN, _M1, _M2 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)
_S27, _S30, _S32 = np.uint64(27), np.uint64(30), np.uint64(32)
_LO32 = np.uint64(0xFFFFFFFF)


def prf(xp: Any, key: Any, x: Any, modulus: int) -> Any:
    """Keyed pseudo-random function of uint64 array ``x`` into ``[0, modulus)`` as float64.

    splitmix64 finalizer of ``x * golden + key`` (uint64 arithmetic wraps by design), then
    Lemire's multiply-shift reduction of the top 32 bits to ``[0, modulus)`` (no division).
    ``key`` is an int or a uint64 array broadcasting against ``x`` (one key per test).
    """
    z = x * _GOLDEN + (xp.uint64(key) if isinstance(key, int) else key)
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = (z >> _S32) * xp.uint64(modulus)
    return (z >> _S32).astype(xp.float64)


def random_elements(
    xp: Any, key: str | Sequence[str], shape: tuple[int, ...], modulus: int = PRIME
) -> Any:
    """A reproducible array of uniform elements of ``[0, modulus)`` drawn from ``key``.

    Each 64-bit splitmix output yields two elements (Lemire reduction of each 32-bit half). With
    a sequence of keys, the arrays of every key are stacked on a new leading axis (one pass).
    """
    n = 1
    for d in shape:
        n *= d
    half = (n + 1) // 2
    if isinstance(key, str):
        k: Any = xp.uint64(_key64(key))
    else:
        k = xp.asarray([_key64(x) for x in key], dtype=xp.uint64).reshape(-1, 1)
    z = xp.arange(half, dtype=xp.uint64) * _GOLDEN + k
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> xp.uint64(31))
    m = xp.uint64(modulus)
    both = xp.concatenate([((z >> _S32) * m) >> _S32, ((z & _LO32) * m) >> _S32], axis=-1)
    lead = () if isinstance(key, str) else (len(key),)
    return both[..., :n].astype(xp.float64).reshape(lead + tuple(shape))


# ---------------------------------------------------------------------- special ops
Special = Callable[[FieldOps, Node, Sequence[Any]], tuple[Any, ...]]


def _fc(f: FieldOps, value: float) -> float:
    return _scalar(float(value))


@functools.lru_cache(maxsize=4096)
def _scalar(value: float) -> float:
    return float(field_const(value))


@functools.lru_cache(maxsize=4096)
def _inv_int(n: int) -> float:
    """Field inverse of the integer ``n`` (a count) as a float64 scalar."""
    return float(pow(n % PRIME, PRIME - 2, PRIME))


def _products(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    op = node.op
    a = [f.to_field(x) for x in a]
    if op in ("mm", "bmm", "matmul"):
        return (f.matmul(a[0], a[1]),)
    if op == "linear":
        y = f.matmul(a[0], f.xp.swapaxes(a[1], -1, -2))
        return (f._additive("add", (y, a[2])) if len(a) == 3 else y,)
    if op == "addmm":
        return (f._additive("add", (f.matmul(a[1], a[2]), a[0])),)
    raise AssertionError(op)


def _pow(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    base, e = f.to_field(a[0]), a[1]
    if e.size == 1:  # small integer exponents are exact (x ** 2 in RMS norm, GELU's x ** 3, 1/x)
        ev = float(f.xp.asarray(e).reshape(()).item())
        ev = ev - PRIME if ev > PRIME // 2 else ev  # the field image of -k is p - k
        if ev == int(ev) and -8 <= ev <= 8:
            out = f.xp.ones_like(base)
            for _ in range(abs(int(ev))):
                out = f.mod(out * base)
            return (out if ev >= 0 else f.inv(out),)  # x ** -k = 1 / x ** k
    return (f.rmap("pow", f.mod(base * 7919 + f.to_field(e))),)


def _div(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (f.mod(f.to_field(a[0]) * f.inv(f.to_field(a[1]))),)


def gelu_tanh_consts(dtype: str) -> tuple[float, float]:
    """``(0.044715, sqrt(2 / pi))`` rounded to the compute dtype of ``dtype`` (as torch does)."""
    t = numpy_dtype(dtype).type
    return float(t(0.044715)), float(t(math.sqrt(2.0 / math.pi)))


def _gelu(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = f.to_field(a[0])
    if node.attrs["approximate"] != "tanh":
        return (f.rmap("gelu", x),)
    # the tanh form spelled out, so the decomposed formula (GPT-2's gelu_new) equals it exactly
    k, c = (_fc(f, v) for v in gelu_tanh_consts(node.in_types[0].dtype))
    cube = f.mod(f.mod(x * x) * x)
    inner = f.mod(f.mod(x + f.mod(cube * k)) * c)
    t = f.rmap("tanh|[]", inner)
    return (f.mod(f.mod(x * _fc(f, 0.5)) * f.mod(t + 1.0)),)


def _unary_derived(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = f.to_field(a[0])
    if node.op == "reciprocal":
        return (f.inv(x),)
    if node.op == "rsqrt":
        return (f.inv(f.rmap("sqrt|[]", x)),)
    if node.op == "silu":
        return (f.mod(x * f.rmap("sigmoid|[]", x)),)
    if node.op == "cast":
        return (x,) if is_float(node.types[0].dtype) else (f.from_field(x, node.types[0].dtype),)
    if node.op == "logical_not":
        return (f.xp.logical_not(a[0]),)
    raise AssertionError(node.op)


def _order(f: FieldOps, x: Any) -> Any:
    """Keys of a random strict total order of field elements: a random map, ties broken by the
    element (``key * p + x < 2**53``: exact in float64)."""
    return f.rmap("order", x) * PRIME + x


def _compare(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x, y = (f.to_field(v) for v in a)
    if node.op in ("maximum", "minimum"):  # the larger (smaller) element under a random order
        kx, ky = _order(f, x), _order(f, y)
        pick = kx >= ky if node.op == "maximum" else kx <= ky
        return (f.xp.where(pick, x, y),)
    return (f.rmap(node.op, f.mod(x * 7919 + y)) < PRIME / 2,)


def _reduce_dims(node: Node, ndim: int) -> tuple[int, ...]:
    d = node.attrs.get("dims")
    return tuple(range(ndim)) if d is None else tuple(d)


def _mean(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = f.to_field(a[0])
    dims = _reduce_dims(node, x.ndim)
    n = math.prod(x.shape[d] for d in dims)
    s = f.mod(x.sum(axis=dims, keepdims=node.attrs["keepdim"]))
    return (f.mod(s * _inv_int(n)),)


def _amax(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    """The largest (``amax``) or smallest element along the dims under the random order of
    `_order`, so a reduction and ``maximum``/``minimum`` agree, as they do on the reals."""
    xp, x = f.xp, f.to_field(a[0])
    dims = _reduce_dims(node, x.ndim)
    keep = [d for d in range(x.ndim) if d not in dims]
    moved = xp.transpose(x, (*keep, *dims))
    flat = moved.reshape((*moved.shape[: len(keep)], -1))
    key = _order(f, flat)
    idx = xp.argmax(key, axis=-1) if node.op == "amax" else xp.argmin(key, axis=-1)
    out = xp.take_along_axis(flat, idx[..., None], axis=-1)[..., 0]
    if node.attrs["keepdim"]:
        out = out.reshape(tuple(1 if d in dims else n for d, n in enumerate(x.shape)))
    return (out,)


def softmax_field(f: FieldOps, x: Any, dim: int, log: bool = False) -> Any:
    """Field surrogate of (log-)softmax along ``dim``."""
    e = f.rmap("exp|[]", x)
    s = f.mod(e.sum(axis=dim, keepdims=True))
    if log:
        return f.mod(x - f.rmap("log|[]", s))
    return f.mod(e * f.inv(s))


def _softmax(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (softmax_field(f, f.to_field(a[0]), node.attrs["dim"], node.op == "log_softmax"),)


def _norm(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = f.to_field(a[0])
    axes = tuple(range(x.ndim - len(node.attrs["normalized_shape"]), x.ndim))
    n = _inv_int(math.prod(x.shape[i] for i in axes))
    eps = _fc(f, node.attrs["eps"])
    if node.op == "layer_norm":
        mu = f.mod(f.mod(x.sum(axis=axes, keepdims=True)) * n)
        x = f.mod(x - mu)
    var = f.mod(f.mod(f.mod(x * x).sum(axis=axes, keepdims=True)) * n)  # exact past 2**13 terms
    y = f.mod(x * f.inv(f.rmap("sqrt|[]", f.mod(var + eps))))
    if len(a) > 1:
        y = f.mod(y * f.to_field(a[1]))
    if len(a) > 2:
        y = f.mod(y + f.to_field(a[2]))
    return (y,)


def _batch_norm(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x, w, b, mean, var = (f.to_field(v) for v in a)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = f.mod(w * f.inv(f.rmap("sqrt|[]", f.mod(var + _fc(f, node.attrs["eps"])))))
    y = f.mod(f.mod(x - mean.reshape(shape)) * scale.reshape(shape))
    return (f.mod(y + b.reshape(shape)),)


def _sdpa(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    xp, attrs = f.xp, node.attrs
    q, k, v = (f.to_field(t) for t in a[:3])
    if attrs.get("enable_gqa") and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = xp.repeat(k, rep, axis=-3), xp.repeat(v, rep, axis=-3)
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    s = f.mod(f.matmul(q, xp.swapaxes(k, -1, -2)) * _fc(f, scale))
    L, S = q.shape[-2], k.shape[-2]
    ninf = _scalar(-math.inf)
    if attrs["is_causal"]:
        s = xp.where(xp.tril(xp.ones((L, S), dtype=bool)), s, ninf)
    if len(a) == 4:
        m = a[3]
        s = xp.where(m, s, ninf) if m.dtype == bool else f.mod(s + f.to_field(m))
    return (f.matmul(softmax_field(f, s, -1), v),)


def _conv(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    a = [f.to_field(x) for x in a]
    if a[1].shape[1] * a[1].shape[2] * a[1].shape[3] > MAX_CHUNK:
        raise VerificationError(
            f"conv2d with a contraction over {MAX_CHUNK} is not exact in the field."
        )
    return tuple(f.mod(o) for o in get_op(node.op).impl(f.xp, a, node.attrs))


def _avg_pool(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = f.to_field(a[0])
    kh, kw = node.attrs["kernel"]
    (y,) = get_op(node.op).impl(f.xp, [x], node.attrs)
    summed = f.mod(f.xp.rint(y * (kh * kw)))
    return (f.mod(summed * _inv_int(kh * kw)),)


def _max_pool(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    """Symmetric surrogate of max pooling: the window sum of a random map (padding = -inf)."""
    xp = f.xp
    (kh, kw), (sh, sw), (ph, pw) = node.attrs["kernel"], node.attrs["stride"], node.attrs["padding"]
    x = xp.pad(
        f.to_field(a[0]), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=_scalar(-math.inf)
    )
    m = f.rmap("max_pool2d", x)
    ho, wo = node.types[0].shape[2:]
    out = None
    for i in range(kh):
        for j in range(kw):
            part = m[:, :, i : i + sh * (ho - 1) + 1 : sh, j : j + sw * (wo - 1) + 1 : sw]
            out = part if out is None else out + part
    return (f.mod(out),)


def _fused(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return run_body(f, node.attrs["body"], a)


def _const(f: FieldOps, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    arr: ConstArray = node.attrs["value"]
    if is_float(arr.dtype):
        return (f.xp.asarray(_field_array(arr)),)
    return (f.xp.asarray(arr.array),)


@functools.lru_cache(maxsize=1024)
def _field_array(arr: ConstArray) -> np.ndarray:
    """Field image of a constant (cached by content digest; read-only)."""
    out = field_const(arr.array)
    out.flags.writeable = False
    return out


_SPECIAL: Mapping[str, Special] = {
    **{op: _products for op in ("mm", "bmm", "matmul", "linear", "addmm")},
    "pow": _pow,
    "gelu": _gelu,
    "div": _div,
    **{op: _unary_derived for op in ("reciprocal", "rsqrt", "silu", "cast", "logical_not")},
    **{op: _compare for op in ("maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge")},
    "mean": _mean,
    "amax": _amax,
    "amin": _amax,
    "softmax": _softmax,
    "log_softmax": _softmax,
    "layer_norm": _norm,
    "rms_norm": _norm,
    "batch_norm": _batch_norm,
    "sdpa": _sdpa,
    "conv2d": _conv,
    "avg_pool2d": _avg_pool,
    "max_pool2d": _max_pool,
    "fused": _fused,
    "const": _const,
    "assume": lambda f, node, a: (f.to_field(a[0]),),  # a promise: the identity in the field
}
