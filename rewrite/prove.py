"""z3 proofs of rewrite rules, element-level over small concrete shapes.

A rule is proven on its proof instance: its sample graph with every size drawn in ``[1, 3]``
(`Rule.sample_graph(seed, lo=1, hi=3)`). Every float input and parameter element becomes a z3
``Real`` variable, and both graphs (before and after each rewrite site) are evaluated
symbolically on numpy object arrays of z3 terms:

* linear and layout ops (`OpDef.linear`) run their numpy reference implementation on the terms;
* element-wise non-linear ops (`OpDef.random_map`) are uninterpreted functions ``Real -> Real``
  (one per op and attrs), with the identities rules may rely on built in:
  ``rsqrt(x) = recip(sqrt(x))``, ``silu(x) = x * sigmoid(x)``, ``a / b = a * recip(b)``;
* an ``assume`` node is an uninterpreted function whose values lie in its domain (a fact per
  element); a proof of graphs holding one also has `domain_axioms` (``exp(log(x)) = x`` for
  ``x > 0``, ``sqrt(x)**2 = x`` for ``x >= 0``, ...), so rules relying on a domain are proven for
  every value in it;
* softmax is ``exp(x) * recip(sum(exp(x)))``; layer/RMS/batch norm and attention are spelled out
  from the same functions; ``maximum``/``minimum`` and ``amax``/``amin`` are the real ones
  (``If`` terms); float constants are exact
  rationals;
* integer inputs and parameters are z3 ``Int`` variables (unbounded integers, so a rule must hold
  for every integer, not just the ones a test draws), except index sources (values reaching an
  ``index_select``/``embedding`` index, `rewrite.verify.sources.index_bounds`), which take fixed
  random concrete values in ``[0, n)``; bool tensors (masks) take fixed random concrete values.
  Symbolic integers support ring, layout, comparison, ``where``, ``maximum``/``minimum``,
  ``abs``/``relu`` and cast ops; any other op on them is an ``error`` verdict (a rejection).

The rule is *proved* when, for every output element ``i``, ``before[i] == after[i]`` holds for all
values of the variables and functions: first by normalizing ``before[i] - after[i]`` to sums of
monomials (instant for correct rules), otherwise by asking z3 for a model of
``Or(before[i] != after[i])`` with a time limit. ``unsat`` proves the rule, ``sat`` refutes it with
a counterexample, and ``unknown`` (a timeout) counts as a rejection.

Verdicts are cached in a `VerdictCache` (namespace ``"proof"``) under the rule fingerprint
(`Rule.fingerprint`) and `SEMANTICS_VERSION`, so each rule is proven once per machine until the
rule or the symbolic semantics change. Only ``proved`` and ``refuted`` verdicts are cached.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import z3

from rewrite.errors import VerificationError
from rewrite.ir import ConstArray, Graph, Node
from rewrite.ops import get_op, ops_where
from rewrite.verify.field import gelu_tanh_consts, is_float, run_body
from rewrite.verify.sources import SourceKey, index_bounds, is_int

if TYPE_CHECKING:
    from rewrite.rules.base import Rule
    from rewrite.verify.cache import VerdictCache

__all__ = ["VERDICTS", "ProofResult", "prove_graphs", "prove_pair", "prove_rule"]

#: Possible verdicts; only ``"proved"`` accepts a rule.
VERDICTS = ("proved", "refuted", "unknown", "error")
_PROOF_SEED = 0
#: Version of the symbolic semantics; part of every cache key, so a change re-proves every rule.
SEMANTICS_VERSION = 4  # 4: x ** -k is a reciprocal; max/min are real (If terms)


@dataclass(frozen=True)
class ProofResult:
    """Outcome of proving one rule.

    Attributes:
        rule: Rule name.
        verdict: One of `VERDICTS`.
        detail: Counterexample (``refuted``), reason (``unknown``/``error``) or proof summary.
        fingerprint: The rule fingerprint the verdict is keyed by.
        seconds: Wall time of the proof (0 when cached).
        cached: Whether the verdict came from the cache.
    """

    rule: str
    verdict: str
    detail: str
    fingerprint: str
    seconds: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        """Whether the rule is accepted."""
        return self.verdict == "proved"


class Z3Ops:
    """Symbolic semantics: numpy object arrays of z3 terms (see the module docstring)."""

    xp = np

    def __init__(self) -> None:
        self._funcs: dict[str, z3.FuncDeclRef] = {}
        self.seed = _PROOF_SEED
        self.facts: list[Any] = []  # what `assume` nodes promise about their values

    def fn(self, name: str, arity: int = 1) -> z3.FuncDeclRef:
        """The uninterpreted function ``name`` (Real^arity -> Real)."""
        f = self._funcs.get(name)
        if f is None:
            f = self._funcs[name] = z3.Function(name, *([z3.RealSort()] * arity), z3.RealSort())
        return f

    def apply(self, name: str, *arrays: Any) -> Any:
        """Apply uninterpreted function ``name`` element-wise (broadcasting)."""
        f = self.fn(name, len(arrays))
        return np.vectorize(lambda *xs: f(*xs), otypes=[object])(*arrays)

    def recip(self, a: Any) -> Any:
        """Uninterpreted reciprocal (total, so no division-by-zero corner cases)."""
        return self.apply("recip", a)

    def run(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Symbolic outputs of ``node``.

        Raises:
            VerificationError: For ops without symbolic semantics.
        """
        op, attrs = node.op, node.attrs
        symbolic = any(np.asarray(a).dtype == object for a in args)
        if op == "where" and np.asarray(args[0]).dtype == object:
            return (_select(*args),)
        if not any(is_float(t.dtype) for t in (*node.types, *node.in_types)):
            if symbolic:
                return _int_symbolic(node, args)
            return tuple(np.asarray(o) for o in get_op(op).impl(np, list(args), attrs))
        fn = _SPECIAL.get(op)
        if fn is not None:
            return fn(self, node, args)
        if op in ops_where(random_map=True):
            return (self.apply(f"{op}{sorted(attrs.items())}", args[0]),)
        if op in ops_where(linear=True):
            outs = get_op(op).impl(np, list(args), attrs)
            return tuple(np.asarray(o, dtype=object) for o in outs)
        raise VerificationError(f"op {op!r} has no z3 semantics in rewrite.prove.")


def _vec(fn: Any, *arrays: Any) -> Any:
    """``fn`` applied element-wise (broadcasting) into an object array."""
    return np.vectorize(fn, otypes=[object])(*arrays)


def _ite(c: Any, x: Any, y: Any) -> Any:
    """``x if c else y`` for a z3 ``Bool`` or a concrete condition."""
    return z3.If(c, x, y) if z3.is_expr(c) else (x if c else y)


def _select(cond: Any, a: Any, b: Any) -> Any:
    """``where(cond, a, b)`` with symbolic (z3 ``Bool``) or concrete conditions."""
    return _vec(_ite, cond, a, b)


_INT_COMPARE = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
    "maximum": lambda x, y: _ite(x >= y, x, y),
    "minimum": lambda x, y: _ite(x <= y, x, y),
    "logical_and": lambda x, y: z3.And(_as_term(x), _as_term(y)),
    "logical_or": lambda x, y: z3.Or(_as_term(x), _as_term(y)),
}
_INT_UNARY = {
    "abs": lambda x: _ite(x >= 0, x, -x),
    "relu": lambda x: _ite(x >= 0, x, 0),
    "logical_not": lambda x: z3.Not(_as_term(x)),
}


def _int_symbolic(node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
    """Outputs of an integer/bool node with symbolic (z3 ``Int``/``Bool``) arguments.

    numpy's own comparisons must not see z3 terms: it would turn the ``BoolRef`` of ``a == b``
    into a Python bool by structural equality, silently deciding the comparison.
    """
    op = node.op
    if op in _INT_COMPARE:
        return (_vec(_INT_COMPARE[op], *args),)
    if op in _INT_UNARY:
        return (_vec(_INT_UNARY[op], args[0]),)
    if op == "cast":
        if node.types[0].dtype == "bool":
            return (_vec(lambda x: _as_term(x) != 0 if z3.is_arith(_as_term(x)) else x, args[0]),)
        return (np.asarray(args[0], dtype=object),)  # int -> int: unbounded integers
    if op in ops_where(linear=True):
        outs = get_op(op).impl(np, [np.asarray(a, dtype=object) for a in args], node.attrs)
        return tuple(np.asarray(o, dtype=object) for o in outs)
    raise VerificationError(
        f"op {op!r} has no z3 semantics on symbolic integers in rewrite.prove; "
        "the rule is rejected (add the op to rewrite.prove._int_symbolic to prove it)."
    )


def _rational(v: float) -> Any:
    if math.isinf(v):
        return z3.Real("POS_INF" if v > 0 else "NEG_INF")
    if math.isnan(v):
        return z3.Real("NAN")
    fr = Fraction(v)
    return z3.RealVal(f"{fr.numerator}/{fr.denominator}")


def _const(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    arr: ConstArray = node.attrs["value"]
    if not is_float(arr.dtype):
        return (np.asarray(arr.array),)
    flat = [_rational(float(v)) for v in np.asarray(arr.array, dtype=np.float64).ravel()]
    return (np.array(flat + [None], dtype=object)[:-1].reshape(arr.array.shape),)


def _derived(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    op = node.op
    if op == "div":
        return (a[0] * z.recip(a[1]),)
    if op == "reciprocal":
        return (z.recip(a[0]),)
    if op == "rsqrt":
        return (z.recip(z.apply("sqrt[]", a[0])),)
    if op == "silu":
        return (a[0] * z.apply("sigmoid[]", a[0]),)
    if op == "gelu":
        if node.attrs["approximate"] != "tanh":
            return (z.apply("gelu", a[0]),)
        k, c = (_rational(v) for v in gelu_tanh_consts(node.in_types[0].dtype))
        x = a[0]
        t = z.apply("tanh[]", (x + x * x * x * k) * c)
        return (x * _rational(0.5) * (t + 1),)
    if op == "cast" and is_float(node.types[0].dtype):
        if is_float(node.in_types[0].dtype):
            return (a[0],)
        return (_vec(_to_real, a[0]),)  # int/bool -> float: the exact value
    if op == "pow":
        e = a[1]
        if e.size == 1:
            ev = (
                z3.simplify(z3.RealVal(0) + e.reshape(()).item())
                if e.dtype == object
                else e.reshape(()).item()
            )
            try:
                k = int(str(ev)) if e.dtype == object else int(ev)
            except ValueError:
                k = 99  # not an integer: the uninterpreted pow below
            exact = str(ev) == str(k) if e.dtype == object else float(ev) == k
            if -8 <= k <= 8 and exact:
                out = np.ones_like(a[0], dtype=object)
                for _ in range(abs(k)):
                    out = out * a[0]
                return (out if k >= 0 else z.recip(out),)  # x ** -k = 1 / x ** k
        return (z.apply("pow", a[0], a[1]),)
    if op in ("amax", "amin"):
        return (_extreme(a[0], node.attrs["dims"], node.attrs["keepdim"], op == "amax"),)
    if op in ("maximum", "minimum"):
        pick = (lambda x, y: x >= y) if op == "maximum" else (lambda x, y: x <= y)
        return (_vec(lambda x, y: z3.If(pick(x, y), x, y), a[0], a[1]),)
    raise VerificationError(f"op {op!r} has no z3 semantics for these dtypes in rewrite.prove.")


def _extreme(x: Any, dims: Any, keepdim: bool, largest: bool) -> Any:
    """The real maximum (minimum) of ``x`` along ``dims``, as nested ``If`` terms."""
    dims = tuple(range(x.ndim)) if dims is None else tuple(dims)
    keep = [d for d in range(x.ndim) if d not in dims]
    moved = np.transpose(x, (*keep, *dims))
    flat = moved.reshape((*moved.shape[: len(keep)], -1))
    out = flat[..., 0]
    for j in range(1, flat.shape[-1]):
        y = flat[..., j]
        pick = (lambda u, v: u >= v) if largest else (lambda u, v: u <= v)
        out = _vec(lambda u, v, pick=pick: z3.If(pick(u, v), u, v), out, y)
    if keepdim:
        out = np.asarray(out, dtype=object).reshape(
            tuple(1 if d in dims else n for d, n in enumerate(x.shape))
        )
    return np.asarray(out, dtype=object)


def _softmax_sym(z: Z3Ops, x: Any, dim: int, log: bool = False) -> Any:
    e = z.apply("exp[]", x)
    s = e.sum(axis=dim, keepdims=True)
    return x - z.apply("log[]", s) if log else e * z.recip(s)


def _softmax(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (_softmax_sym(z, a[0], node.attrs["dim"], node.op == "log_softmax"),)


def _norm(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = a[0]
    axes = tuple(range(x.ndim - len(node.attrs["normalized_shape"]), x.ndim))
    n = math.prod(x.shape[i] for i in axes)
    eps = _rational(node.attrs["eps"])
    if node.op == "layer_norm":
        x = x - x.sum(axis=axes, keepdims=True) / n
    var = (x * x).sum(axis=axes, keepdims=True) / n
    y = x * z.recip(z.apply("sqrt[]", var + eps))
    if len(a) > 1:
        y = y * a[1]
    if len(a) > 2:
        y = y + a[2]
    return (y,)


def _batch_norm(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x, w, b, mean, var = a
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = w * z.recip(z.apply("sqrt[]", var + _rational(node.attrs["eps"])))
    return ((x - mean.reshape(shape)) * scale.reshape(shape) + b.reshape(shape),)


def _sdpa(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    attrs = node.attrs
    q, k, v = a[:3]
    if attrs.get("enable_gqa") and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _rational(scale)
    ninf = z3.Real("NEG_INF")
    if attrs["is_causal"]:
        L, S = q.shape[-2], k.shape[-2]
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, ninf)
    if len(a) == 4:
        m = a[3]
        s = _select(m, s, ninf) if node.in_types[3].dtype == "bool" else s + m
    return (np.matmul(_softmax_sym(z, s, -1), v),)


def _fused(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return run_body(z, node.attrs["body"], a)


def _assume(z: Z3Ops, node: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    """A value promised to lie in a domain: an uninterpreted function of the input, with the
    promise as a fact about each element (so a proof holds for every value in the domain)."""
    domain = node.attrs["domain"]
    out = z.apply(f"assume_{domain}", a[0])
    z.facts.extend((t > 0) if domain == "positive" else (t >= 0) for t in out.ravel())
    return (out,)


def domain_axioms(z: Z3Ops) -> list[Any]:
    """Facts of real analysis the domain rules rely on, over the prover's functions: ``exp`` is
    positive and turns sums into products, ``exp(log(x)) = x`` for ``x > 0``, ``sqrt(x)`` is the
    non-negative root of ``x >= 0``, ``x * recip(x) = 1`` for ``x != 0``. Quantified with
    patterns, so z3 instantiates them on the terms of the obligation; added only to proofs of
    graphs holding an ``assume`` node."""
    exp, log, sqrt, recip = z.fn("exp[]"), z.fn("log[]"), z.fn("sqrt[]"), z.fn("recip")
    x, y = z3.Reals("ax ay")
    return [
        z3.ForAll([x], z3.Implies(x > 0, exp(log(x)) == x), patterns=[log(x)]),
        z3.ForAll([x], exp(x) > 0, patterns=[exp(x)]),
        z3.ForAll([x, y], exp(x + y) == exp(x) * exp(y), patterns=[exp(x + y)]),
        z3.ForAll([x], exp(-x) * exp(x) == 1, patterns=[exp(-x)]),
        z3.ForAll([x], z3.Implies(x != 0, x * recip(x) == 1), patterns=[recip(x)]),
        z3.ForAll(
            [x],
            z3.Implies(x >= 0, z3.And(sqrt(x) >= 0, sqrt(x) * sqrt(x) == x)),
            patterns=[sqrt(x)],
        ),
    ]


_SPECIAL = {
    "const": _const,
    **{
        op: _derived
        for op in (
            "div",
            "reciprocal",
            "rsqrt",
            "silu",
            "gelu",
            "cast",
            "pow",
            "amax",
            "amin",
            "maximum",
            "minimum",
        )
    },
    "softmax": _softmax,
    "log_softmax": _softmax,
    "layer_norm": _norm,
    "rms_norm": _norm,
    "batch_norm": _batch_norm,
    "sdpa": _sdpa,
    "fused": _fused,
    "assume": _assume,
}


# ---------------------------------------------------------------------- proving
def _symbolic_outputs(
    z: Z3Ops, g: Graph, env: dict[str, Any], bounds: dict[SourceKey, int]
) -> list[Any]:
    """Symbolic outputs of ``g``; sources are created in (or read from) ``env``, index sources
    get concrete values below their ``bounds``."""
    vals: dict[int, tuple[Any, ...]] = {}
    rng = np.random.default_rng(_PROOF_SEED)
    for node in g:
        if node.op in ("input", "param"):
            name = node.attrs["name"]
            key = f"{node.op}:{name}"
            if key not in env:
                t = node.type
                bound = bounds.get((node.op, name))
                if is_float(t.dtype) or (is_int(t.dtype) and bound is None):
                    var = z3.Real if is_float(t.dtype) else z3.Int
                    arr = np.empty(t.shape, dtype=object)
                    for idx in np.ndindex(*t.shape):
                        arr[idx] = var(f"{name}{list(idx)}")
                    env[key] = arr
                elif t.dtype == "bool":
                    env[key] = rng.random(t.shape) < 0.5
                else:
                    env[key] = rng.integers(0, bound, size=t.shape)
            vals[node.id] = (env[key],)
            continue
        vals[node.id] = z.run(node, [vals[v.node][v.index] for v in node.inputs])
    return [np.asarray(vals[v.node][v.index]) for v in g.outputs]


def _is_zero(e: Any) -> bool:
    return (z3.is_rational_value(e) or z3.is_int_value(e)) and str(e) == "0"


def _as_term(x: Any) -> Any:
    if isinstance(x, z3.ExprRef):
        return x
    if isinstance(x, bool | np.bool_):
        return z3.BoolVal(bool(x))
    if isinstance(x, int | np.integer):
        return z3.IntVal(int(x))
    return z3.RealVal(x)


def _to_real(x: Any) -> Any:
    """An Int, Bool or Real term (or concrete value) as a Real term."""
    t = _as_term(x)
    if z3.is_bool(t):
        return z3.If(t, z3.RealVal(1), z3.RealVal(0))
    return z3.ToReal(t) if z3.is_int(t) else t


def prove_graphs(before: Graph, after: Graph, timeout_ms: int = 2000) -> tuple[str, str]:
    """Prove two small graphs equal element-wise.

    Args:
        before: A graph (proof-sized: every tensor has few elements).
        after: A graph with the same inputs and output types.
        timeout_ms: z3 time limit for the whole query.

    Returns:
        ``(verdict, detail)`` with verdict in ``("proved", "refuted", "unknown", "error")``.
    """
    z = Z3Ops()
    env: dict[str, Any] = {}
    bounds = index_bounds(before, after)  # both graphs see the same concrete index values
    try:
        xs = _symbolic_outputs(z, before, env, bounds)
        ys = _symbolic_outputs(z, after, env, bounds)
    except (VerificationError, NotImplementedError, TypeError, ValueError, z3.Z3Exception) as exc:
        return "error", f"symbolic evaluation failed: {exc}"
    diffs = []
    for j, (x, y) in enumerate(zip(xs, ys)):
        if x.shape != y.shape:
            return "refuted", f"output {j} has shape {x.shape} before and {y.shape} after."
        for idx in np.ndindex(*x.shape):
            a, b = _as_term(x[idx]), _as_term(y[idx])
            if a.sort() != b.sort():  # e.g. a symbolic Int against a folded constant
                a, b = _to_real(a), _to_real(b)
            if z3.is_arith(a) and _is_zero(z3.simplify(a - b, som=True)):
                continue
            if z3.eq(z3.simplify(a), z3.simplify(b)):
                continue
            diffs.append((j, idx, a, b))
    if not diffs:
        return "proved", "every output element normalizes to the same polynomial"
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    if z.facts:  # a domain promise: prove under it, with the facts about exp, log and sqrt
        s.add(*z.facts, *domain_axioms(z))
    s.add(z3.Or([a != b for _, _, a, b in diffs]))
    res = s.check()
    if res == z3.unsat:
        return "proved", f"z3 proved {len(diffs)} non-trivial element(s) equal"
    if res == z3.sat:
        return "refuted", _counterexample(s.model(), diffs, env)
    return "unknown", f"z3 returned unknown ({s.reason_unknown()}) within {timeout_ms} ms"


def prove_pair(
    before: Graph, after: Graph, timeout_ms: int = 10_000, max_elements: int = 4096
) -> tuple[str, str]:
    """Prove a graph and its rewrite equal at the smallest sizes that keep their size relations.

    Both graphs are shape-reduced with one size map (`rewrite.verify.reduce.reduce_pair`: the
    same computation with smaller numbers in the same symbolic shapes), then proven element-wise
    by `prove_graphs`.

    Args:
        before: A graph.
        after: A rewrite of it (same inputs and output types).
        timeout_ms: z3 time limit.
        max_elements: Most symbolic input elements tried after reduction.

    Returns:
        ``(verdict, detail)`` as `prove_graphs`, or ``("skipped", why)`` when the pair does not
        shrink below ``max_elements`` input elements (a stack of 200 computed rows keeps its 200
        pieces) or does not rebuild at reduced sizes.
    """
    from rewrite.errors import ShapeReductionError
    from rewrite.verify.reduce import reduce_pair

    try:
        pair = reduce_pair(before, after)
    except ShapeReductionError as e:
        return "skipped", f"no shape reduction keeps the graphs' size relations: {e}"
    a, b = pair if pair is not None else (before, after)
    n = sum(node.type.numel for node in a if node.op in ("input", "param"))
    if n > max_elements:
        return "skipped", f"{n} symbolic input elements after shape reduction (over {max_elements})"
    verdict, detail = prove_graphs(a, b, timeout_ms)
    sizes = sorted({d for node in a if node.op in ("input", "param") for d in node.type.shape})
    return verdict, f"{detail} (input sizes reduced to {sizes})"


def _counterexample(
    model: z3.ModelRef, diffs: list[tuple[int, Any, Any, Any]], env: dict[str, Any]
) -> str:
    for j, idx, a, b in diffs:
        va, vb = model.eval(a, model_completion=True), model.eval(b, model_completion=True)
        if not z3.is_true(z3.simplify(va == vb)):
            assigned = ", ".join(
                f"{d.name()}={model[d]}" for d in list(model.decls())[:8] if d.arity() == 0
            )
            return f"output {j}{list(idx)}: before={va}, after={vb} with {assigned}"
    return "z3 found a model where the graphs differ"


def prove_rule(
    rule: Rule,
    timeout_ms: int = 2000,
    cache: VerdictCache | None = None,
    seeds: Sequence[int] = (0,),
) -> ProofResult:
    """Prove ``rule`` on its proof instances (one per seed), using and filling ``cache``.

    Args:
        rule: The rule.
        timeout_ms: z3 time limit per query; ``unknown`` rejects the rule.
        cache: Verdict cache (namespace ``"proof"``), or None.
        seeds: Seeds of the proof-sized sample graphs.

    Returns:
        The `ProofResult`.
    """
    t0 = time.perf_counter()
    try:
        fp = rule.fingerprint(seeds[0])
    except Exception as exc:  # a broken sample or builder rejects the rule
        return ProofResult(rule.name, "error", f"instantiating the rule failed: {exc!r}", "", 0.0)
    if cache is not None:
        rec = cache.get("proof", f"{fp}|v{SEMANTICS_VERSION}")
        if rec is not None:
            return ProofResult(rec["rule"], rec["verdict"], rec["detail"], fp, 0.0, True)
    verdict, detail = "error", "no site"
    for seed in seeds:
        g = rule.sample_graph(seed, lo=1, hi=3)
        for site in rule.matches(g):
            verdict, detail = prove_graphs(g, rule.apply(g, site), timeout_ms)
            if verdict != "proved":
                break
        if verdict != "proved":
            break
    res = ProofResult(rule.name, verdict, detail, fp, time.perf_counter() - t0)
    if cache is not None and verdict in ("proved", "refuted"):
        rec = asdict(res)
        rec.pop("cached")
        cache.put("proof", f"{fp}|v{SEMANTICS_VERSION}", rec)
    return res
