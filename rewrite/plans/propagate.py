"""Sharding propagation: one rule per op family decides how a node runs on sharded inputs.

`propagate(graph, mesh, seeds)` walks a graph in topological order. Sources take the sharding
their seed gives (parameters: the plan's choice; the block input: replicated, or split along the
sequence for sequence parallelism); every other node asks its family's `PropagationRule` for
the input shardings it runs on (``wanted``) and the output shardings it produces. Where a value
arrives in another sharding than a consumer wants, `redistribute` prices the move; consumers of
one value wanting one sharding share one move (as ``PrepareModuleInput`` makes DTensor do).

The backward pass follows from the forward one (`Propagation.backward`): the gradient arriving
at a consumer's input has the input's wanted sharding, and is partial along every mesh axis
that splits the consumer's output but not that input (the consumer's work was split there while
the input was shared: a column-parallel linear's input gradient, a replicated norm weight's
gradient under sequence parallelism); it is moved back to the value's own sharding. That gives
Megatron's ``f``/``g`` pairs and their sequence-parallel forms without naming them.

The rules, by family (`RULES`):

* ``linear``: ``x[..., K] W[N, K]``: the output's last dim is split like ``W``'s dim 0 (column
  parallel); ``x``'s last dim must be split like ``W``'s dim 1, and then the output is partial
  there (row parallel); an axis splitting ``W`` cannot split ``x``'s other dims (gathered).
* ``matmul``: batch dims carry, ``M`` from the left, ``N`` from the right, a ``K`` split on both
  gives a partial output.
* ``elementwise``: the output takes the sharding of one input (the candidate whose moves cost
  least); pending sums pass through ``add``/``sub`` of equally partial inputs and through ops
  linear in their one partial input (``mul``, ``div`` numerator, ``cast``, ``neg``).
* ``reduction``: a summed dim split on an axis gives a partial output (``sum``, ``mean``);
  ``amax``/``amin``, ``softmax`` and ``log_softmax`` need their dim whole.
* ``norm``: the normalized dims must be whole; other dims carry (sequence parallelism).
* ``attention``: heads carry (q, k and v split alike), a query-sequence split needs the whole
  key/value sequence (context parallelism gathers it), the head size must be whole.
* ``view``: reshape maps a split to the major dim of its group; permute/transpose permute;
  expand, slice, split, concat keep splits off the dims they touch (but a split into equal
  parts keeps the cut dim's split on each part: a fused projection regrouped per device).
* ``embedding``: a vocabulary split gives a partial output, a width split a split last dim.
* ``conv``: output channels carry the weight's split; spatial dims must be whole.
* anything else (``opaque``, pools with split spatial dims...): inputs gathered, output
  replicated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rewrite.errors import PlanError
from rewrite.ir import Graph, Node, TensorType, Value
from rewrite.ops.base import get_op
from rewrite.plans.sharding import Axes, Collective, Sharding, redistribute

__all__ = ["RULES", "Propagation", "PropagationRule", "propagate", "rule_for"]

Shardings = tuple[Sharding, ...]
RuleFn = Callable[[Node, Shardings, Mapping[str, int]], tuple[Shardings, Shardings]]

_LINEAR_IN_ONE = frozenset({"mul", "cast", "neg", "div"})
_SUMS = frozenset({"add", "sub"})


@dataclass(frozen=True)
class PropagationRule:
    """How one op family runs on sharded inputs.

    Attributes:
        name: The rule's name (``propagate_<family>``).
        ops: The ops it covers.
        fn: ``fn(node, input shardings, mesh) -> (wanted input shardings, output shardings)``.
        doc: One sentence.
    """

    name: str
    ops: frozenset[str]
    fn: RuleFn
    doc: str


def _strip(d: Axes, banned: frozenset[str] | set[str]) -> Axes:
    return tuple(a for a in d if a not in banned)


def _divides(size: int, axes: Axes, mesh: Mapping[str, int]) -> bool:
    n = 1
    for a in axes:
        n *= mesh[a]
    return size % n == 0


def _fit(dims: list[Axes], t: TensorType, mesh: Mapping[str, int]) -> tuple[Axes, ...]:
    """Drop splits that do not divide their dimension."""
    return tuple(d if _divides(s, d, mesh) else () for d, s in zip(dims, t.shape))


# ------------------------------------------------------------------------------ rules
def _linear(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x, w = ins[0], ins[1]
    an, ak = w.dims[0], w.dims[1]
    banned = set(an) | set(ak)
    batch = [_strip(d, banned) for d in x.dims[:-1]]
    partial = _strip(x.partial, banned)
    want_x = Sharding((*batch, ak), partial)
    out = Sharding(tuple(_fit([*batch, an], node.types[0], mesh)), tuple(ak) + partial)
    wanted: list[Sharding] = [want_x, w]
    if len(ins) == 3:
        wanted.append(Sharding((an,), out.partial))
    return tuple(wanted), (out,)


def _align(s: Sharding, rank: int) -> list[Axes]:
    """``s``'s dims aligned right to ``rank`` dims (missing leading dims unsplit)."""
    return [()] * (rank - s.rank) + list(s.dims)


def _project(dims: list[Axes], t: TensorType, out: TensorType, partial: Axes) -> Sharding:
    """The sharding an input of type ``t`` needs to meet output dims ``dims`` (broadcast
    dims stay whole)."""
    lead = out.rank - t.rank
    own = tuple(dims[lead + i] if t.shape[i] == out.shape[lead + i] else () for i in range(t.rank))
    return Sharding(own, partial)


def _redistribution_cost(
    src: Sharding, dst: Sharding, t: TensorType, mesh: Mapping[str, int]
) -> float:
    return sum(
        c.nbytes * (2.0 if c.kind == "all_reduce" else 1.0) for c in redistribute(src, dst, t, mesh)
    )


def _elementwise(
    node: Node, ins: Shardings, mesh: Mapping[str, int]
) -> tuple[Shardings, Shardings]:
    out_t = node.types[0]
    partial_ins = [s.partial for s in ins]
    if node.op in _SUMS and all(p == partial_ins[0] for p in partial_ins) and partial_ins[0]:
        keep: Axes = partial_ins[0]
    elif (
        node.op in _LINEAR_IN_ONE
        and sum(bool(p) for p in partial_ins) == 1
        and (node.op != "div" or partial_ins[0])
    ):
        keep = next(p for p in partial_ins if p)
    else:
        keep = ()
    best: tuple[float, int, Shardings, Sharding] | None = None
    for cand in ins:
        dims = _align(cand, out_t.rank)
        if set(a for d in dims for a in d) & set(keep):
            continue
        fitted = list(_fit(dims, out_t, mesh))
        wanted = tuple(
            _project(fitted, t, out_t, keep if s.partial else ())
            for s, t in zip(ins, node.in_types)
        )
        cost = sum(
            _redistribution_cost(s, w, t, mesh) for s, w, t in zip(ins, wanted, node.in_types)
        )
        splits = -sum(len(d) for d in fitted)
        key = (cost, splits)
        if best is None or key < best[:2]:
            best = (cost, splits, wanted, Sharding(tuple(fitted), keep))
    assert best is not None
    return best[2], (best[3],) * len(node.types)


def _reduce_dims(node: Node) -> tuple[int, ...]:
    rank = node.in_types[0].rank
    if node.op in ("softmax", "log_softmax"):
        return (node.attrs["dim"] % rank,)
    dims = node.attrs.get("dims")
    return tuple(range(rank)) if dims is None else tuple(d % rank for d in dims)


def _reduction(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x = ins[0]
    red = _reduce_dims(node)
    if node.op in ("softmax", "log_softmax"):
        want = Sharding(tuple(() if i in red else d for i, d in enumerate(x.dims)))
        return (want,), (want,)
    partial: Axes
    if node.op in ("amax", "amin"):
        want = Sharding(tuple(() if i in red else d for i, d in enumerate(x.dims)))
        x, partial = want, ()
    else:
        partial = tuple(a for i in red for a in x.dims[i]) + x.partial
    keepdim = node.attrs.get("keepdim", False)
    dims = [() if i in red else d for i, d in enumerate(x.dims) if keepdim or i not in red]
    return (x,), (Sharding(tuple(dims), partial),)


def _norm(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x = ins[0]
    if node.op == "batch_norm":
        want = Sharding(tuple(d if i != 1 else () for i, d in enumerate(x.dims)))
        return (want, *(Sharding.replicated(t.rank) for t in node.in_types[1:])), (want,)
    k = len(node.attrs["normalized_shape"])
    want = Sharding(tuple(d if i < x.rank - k else () for i, d in enumerate(x.dims)))
    params = tuple(Sharding.replicated(t.rank) for t in node.in_types[1:])
    return (want, *params), (want,) * len(node.types)


def _attention(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    q = ins[0]
    qt, kt = node.in_types[0], node.in_types[1]
    r = q.rank
    heads = q.dims[r - 3] if r >= 3 else ()
    if r >= 3 and not _divides(kt.shape[r - 3], heads, mesh):
        heads = ()
    batch = [_strip(d, set(heads)) for d in q.dims[: max(0, r - 3)]]
    used = set(heads) | {a for d in batch for a in d}
    seq = _strip(q.dims[r - 2], used)
    head_dims: list[Axes] = [heads] if r >= 3 else []
    want_q = Sharding((*batch, *head_dims, seq, ()))
    want_kv = Sharding((*batch, *head_dims, (), ()))
    wanted = [want_q, want_kv, want_kv]
    if len(ins) == 4:
        full = [*batch, *head_dims, seq, ()]
        wanted.append(
            _project(full, node.in_types[3], TensorType((*qt.shape[:-1], kt.shape[-2]), "bool"), ())
        )
    return tuple(wanted), (want_q,)


def _reshape_groups(a: tuple[int, ...], c: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Runs of input and output dims with equal element counts."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(c):
        gi, gj, pa, pc = [i], [j], a[i], c[j]
        i, j = i + 1, j + 1
        while pa != pc:
            if pa < pc:
                gi.append(i)
                pa, i = pa * a[i], i + 1
            else:
                gj.append(j)
                pc, j = pc * c[j], j + 1
        groups.append((gi, gj))
    if groups:
        groups[-1][0].extend(range(i, len(a)))
        groups[-1][1].extend(range(j, len(c)))
    return groups


def _reshape(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x = ins[0]
    a, c = node.in_types[0].shape, node.types[0].shape
    want = list(x.dims)
    out: list[Axes] = [()] * len(c)
    for gi, gj in _reshape_groups(a, c):
        split = [i for i in gi if x.dims[i]]
        if not split:
            continue
        major = next((i for i in gi if a[i] != 1), gi[0])
        target = next((j for j in gj if c[j] != 1), None)
        if split == [major] and target is not None and _divides(c[target], x.dims[major], mesh):
            out[target] = x.dims[major]
        else:
            for i in split:
                want[i] = ()
    return (Sharding(tuple(want), x.partial),), (Sharding(tuple(out), x.partial),)


def _permute(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x = ins[0]
    if node.op == "transpose":
        perm = list(range(x.rank))
        d0, d1 = node.attrs["dim0"] % x.rank, node.attrs["dim1"] % x.rank
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = list(node.attrs["dims"])
    return (x,), (Sharding(tuple(x.dims[p] for p in perm), x.partial),)


def _expand(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x, t, out_t = ins[0], node.in_types[0], node.types[0]
    lead = out_t.rank - t.rank
    want = tuple(d if t.shape[i] == out_t.shape[lead + i] else () for i, d in enumerate(x.dims))
    return (Sharding(want, x.partial),), (Sharding(((),) * lead + want, x.partial),)


def _along_dim(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    """slice, split, concat, index_select: the dim they cut or join must be whole."""
    t = node.in_types[0]
    dim = node.attrs.get("dim", 0) % t.rank
    first = ins[0]
    dims = tuple(() if i == dim else d for i, d in enumerate(first.dims))
    if node.op == "index_select":
        return (Sharding(dims, first.partial), Sharding.replicated(node.in_types[1].rank)), (
            Sharding(dims, first.partial),
        )
    partial = first.partial if all(s.partial == first.partial for s in ins) else ()
    if node.op == "split" and _fused_split(node, first, dim, mesh):
        return (first,), (first,) * len(node.types)
    want = Sharding(dims, partial)
    return (want,) * len(ins), (want,) * len(node.types)


def _fused_split(node: Node, x: Sharding, dim: int, mesh: Mapping[str, int]) -> bool:
    """Whether a split into equal parts keeps its input's split along the cut dim: each device
    holds the same rows of every part. That is a fused projection (GPT-2's ``c_attn``: query,
    key, value) whose rows `rewrite.plans.apply` regroups per device
    (`rewrite.plans.modules.regroup_fused_qkv`); `rewrite.plans.convert.dtensor_problems` flags
    it where apply does not."""
    sizes = {t.shape[dim] for t in node.types}
    return bool(x.dims[dim]) and len(sizes) == 1 and _divides(sizes.pop(), x.dims[dim], mesh)


def _embedding(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    w, ids = ins
    banned = set(w.dims[0]) | set(w.dims[1])
    id_dims = tuple(_strip(d, banned) for d in ids.dims)
    return (w, Sharding(id_dims)), (Sharding((*id_dims, w.dims[1]), w.dims[0]),)


def _conv(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x, w = ins[0], ins[1]
    groups = node.attrs.get("groups", 1)
    cin = w.dims[1] if groups == 1 else ()
    banned = set(w.dims[0]) | set(cin)
    batch = _strip(x.dims[0], banned)
    want_x = Sharding((batch, cin, (), ()))
    out = Sharding((batch, w.dims[0], (), ()), tuple(cin))
    wanted: list[Sharding] = [want_x, Sharding((w.dims[0], cin, (), ()))]
    if len(ins) == 3:
        wanted.append(Sharding((w.dims[0],), out.partial))
    return tuple(wanted), (out,)


def _matmul(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    x, y = ins[0], ins[1]
    if node.op == "addmm":
        bias, x, y = ins
    xt, yt = (node.in_types[1], node.in_types[2]) if node.op == "addmm" else node.in_types[:2]
    out_t = node.types[0]
    k_axes = x.dims[-1] if x.dims[-1] == y.dims[-2] else ()
    m_axes, n_axes = x.dims[-2], y.dims[-1]
    if set(m_axes) & set(n_axes):
        n_axes = ()
    used = set(k_axes) | set(m_axes) | set(n_axes)
    batch = [_strip(d, used) for d in _align(x, out_t.rank)[: out_t.rank - 2]]
    partial = tuple(k_axes) + (x.partial if not y.partial else ())
    out = Sharding((*batch, m_axes, n_axes), partial)
    want_x = _project(
        [*batch, m_axes, k_axes],
        xt,
        TensorType((*out_t.shape[:-1], xt.shape[-1]), xt.dtype),
        x.partial if not y.partial else (),
    )
    want_y = _project(
        [*batch, k_axes, n_axes],
        yt,
        TensorType((*out_t.shape[:-2], yt.shape[-2], out_t.shape[-1]), yt.dtype),
        (),
    )
    if node.op == "addmm":
        return (Sharding((n_axes,), partial), want_x, want_y), (out,)
    return (want_x, want_y), (out,)


def _gather_all(node: Node, ins: Shardings, mesh: Mapping[str, int]) -> tuple[Shardings, Shardings]:
    wanted = tuple(Sharding.replicated(t.rank) for t in node.in_types)
    return wanted, tuple(Sharding.replicated(t.rank) for t in node.types)


def _families() -> dict[str, tuple[RuleFn, str]]:
    return {
        "linear": (_linear, "linear: column split from W dim 0, row split gives a partial sum"),
        "matmul": (_matmul, "matmul/bmm/mm/addmm: batch carries, K split gives a partial sum"),
        "elementwise": (_elementwise, "elementwise: cheapest input sharding, sums pass linearly"),
        "reduction": (_reduction, "reductions: a summed split dim becomes a partial sum"),
        "norm": (_norm, "norms: normalized dims whole, other dims carry"),
        "attention": (_attention, "sdpa: heads carry, the key/value sequence is gathered"),
        "reshape": (_reshape, "reshape: a split moves to the major dim of its group"),
        "permute": (_permute, "permute/transpose: splits are permuted"),
        "expand": (_expand, "expand: broadcast dims are whole"),
        "along_dim": (_along_dim, "slice/split/concat/index_select: the cut dim is whole"),
        "embedding": (_embedding, "embedding: vocabulary split gives a partial sum"),
        "conv": (_conv, "conv2d: output channels carry W's split, spatial dims whole"),
        "gather_all": (_gather_all, "anything else: inputs gathered, output replicated"),
    }


_OPS = {
    "linear": {"linear"},
    "matmul": {"matmul", "bmm", "mm", "addmm"},
    "reduction": {"sum", "mean", "amax", "amin", "softmax", "log_softmax"},
    "norm": {"layer_norm", "rms_norm", "batch_norm"},
    "attention": {"sdpa"},
    "reshape": {"reshape"},
    "permute": {"permute", "transpose"},
    "expand": {"expand"},
    "along_dim": {"slice", "split", "concat", "index_select"},
    "embedding": {"embedding"},
    "conv": {"conv2d"},
}

#: The propagation rules, one per op family.
RULES: dict[str, PropagationRule] = {
    name: PropagationRule(f"propagate_{name}", frozenset(_OPS.get(name, ())), fn, doc)
    for name, (fn, doc) in _families().items()
}


def rule_for(op: str) -> PropagationRule:
    """The rule covering ``op`` (elementwise ops by their family; anything else gathers)."""
    for rule in RULES.values():
        if op in rule.ops:
            return rule
    try:
        family = get_op(op).family
    except Exception:  # an unknown or opaque op: the conservative rule
        family = ""
    return RULES["elementwise"] if family == "elementwise" else RULES["gather_all"]


# ------------------------------------------------------------------------------ walking
@dataclass
class Propagation:
    """The result of `propagate` over one graph.

    Attributes:
        graph: The graph.
        mesh: The mesh axes propagated over.
        out: Sharding of every value as produced.
        wanted: Per ``(node id, input index)``, the sharding the node runs that input in.
        forward: Forward moves: ``(value, wanted sharding, collectives)``, one per distinct move.
        moves: Every input that arrives in another sharding than its consumer runs it in,
            collectives or not: ``(value, consumer node id, arriving, wanted)``.
        grad: Which values need a gradient (they depend on a parameter or a differentiable
            input).
    """

    graph: Graph
    mesh: dict[str, int]
    out: dict[Value, Sharding] = field(default_factory=dict)
    wanted: dict[tuple[int, int], Sharding] = field(default_factory=dict)
    forward: list[tuple[Value, Sharding, list[Collective]]] = field(default_factory=list)
    grad: set[Value] = field(default_factory=set)
    pinned: dict[Value, tuple[Sharding, Sharding]] = field(default_factory=dict)
    moves: list[tuple[Value, int, Sharding, Sharding]] = field(default_factory=list)

    def local_types(self, node: Node) -> tuple[tuple[TensorType, ...], tuple[TensorType, ...]]:
        """Per-device input and output types of ``node``."""
        ins = tuple(
            self.wanted[(node.id, i)].local_type(t, self.mesh) for i, t in enumerate(node.in_types)
        )
        outs = tuple(self.out[v].local_type(t, self.mesh) for v, t in zip(node.outs, node.types))
        return ins, outs

    def backward(self) -> tuple[list[tuple[Value, list[Collective]]], dict[int, Axes]]:
        """The backward pass's moves, and each parameter's pending gradient sum.

        Returns:
            ``(moves, param_partial)``: per value and distinct arriving gradient sharding, the
            collectives that bring the gradient to the value's sharding; and per parameter node
            id, the mesh axes its gradient is partial along (to be reduced by the plan's
            gradient synchronisation over those axes).
        """
        arriving: dict[Value, set[Sharding]] = {}
        for node in self.graph:
            if node.op in ("input", "param", "const"):
                continue
            out_axes = set().union(*(self.out[v].axes for v in node.outs)) - set().union(
                *(self.out[v].partial for v in node.outs)
            )
            for i, v in enumerate(node.inputs):
                if v not in self.grad:
                    continue
                w = self.wanted[(node.id, i)]
                extra = tuple(a for a in self.mesh if a in out_axes and a not in w.axes)
                arriving.setdefault(v, set()).add(Sharding(w.dims).with_partial(extra))
        moves: list[tuple[Value, list[Collective]]] = []
        param_partial: dict[int, Axes] = {}
        for v, shardings in arriving.items():
            node = self.graph.node(v.node)
            t = node.types[v.index]
            target = Sharding(self.out[v].dims)
            if node.op == "param":
                axes = sorted({a for s in shardings for a in s.partial}, key=list(self.mesh).index)
                if axes:
                    param_partial[node.id] = tuple(axes)
                continue
            for s in sorted(shardings, key=str):
                colls = redistribute(s, target, t, self.mesh)
                if colls:
                    moves.append((v, colls))
            if v in self.pinned:
                made, pin = self.pinned[v]
                colls = redistribute(Sharding(pin.dims), Sharding(made.dims), t, self.mesh)
                if colls:
                    moves.append((v, colls))
        return moves, param_partial


def _needs_grad(node: Node, grad: set[Value], grad_inputs: frozenset[str]) -> bool:
    if node.op == "param":
        return True
    if node.op == "input":
        return node.attrs.get("name") in grad_inputs
    return any(v in grad for v in node.inputs)


def propagate(
    graph: Graph,
    mesh: Mapping[str, int],
    seeds: Mapping[str, Sharding],
    grad_inputs: frozenset[str] = frozenset(),
    pins: Mapping[str, Sharding] | None = None,
) -> Propagation:
    """Propagate shardings through ``graph``.

    Args:
        graph: The graph.
        mesh: Mesh axes and sizes to propagate over (axes of size 1 are ignored).
        seeds: Shardings of sources by name (params and inputs); others are replicated.
        grad_inputs: Names of graph inputs that need a gradient (e.g. a block's hidden state).
        pins: Per node id (as a string), a sharding its first output is moved to right after it
            is computed (where a model's blocks would run: the rest of a model sees the blocks'
            sharding there).

    Returns:
        The `Propagation`.

    Raises:
        PlanError: If a seed does not match its source's rank.
    """
    prop = Propagation(graph, dict(mesh))
    moved: dict[tuple[Value, Sharding], bool] = {}
    for node in graph:
        if node.op in ("input", "param", "const"):
            name = node.attrs.get("name")
            s = seeds.get(name) if isinstance(name, str) else None
            if s is None:
                s = Sharding.replicated(node.type.rank)
            elif s.rank != node.type.rank:
                raise PlanError(f"Seed {s} for {name!r} does not match its type {node.type}.")
            prop.out[node.out(0)] = s
            if _needs_grad(node, prop.grad, grad_inputs):
                prop.grad.add(node.out(0))
            continue
        ins = tuple(prop.out[v] for v in node.inputs)
        wanted, outs = rule_for(node.op).fn(node, ins, mesh)
        for i, (v, have, want) in enumerate(zip(node.inputs, ins, wanted)):
            prop.wanted[(node.id, i)] = want
            if have != want:
                prop.moves.append((v, node.id, have, want))
            if have != want and (v, want) not in moved:
                moved[(v, want)] = True
                colls = redistribute(have, want, node.in_types[i], mesh)
                if colls:
                    prop.forward.append((v, want, colls))
        for v, s in zip(node.outs, outs):
            prop.out[v] = s
        pin = (pins or {}).get(str(node.id))
        if pin is not None and pin != outs[0]:
            v = node.out(0)
            colls = redistribute(outs[0], pin, node.types[0], mesh)
            if colls:
                prop.forward.append((v, pin, colls))
            prop.pinned[v] = (outs[0], pin)
            prop.out[v] = pin
        if _needs_grad(node, prop.grad, grad_inputs):
            prop.grad.update(node.outs)
    return prop
