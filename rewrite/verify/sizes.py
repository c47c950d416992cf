"""Size relations of a graph and the size maps that keep them (for shape-reduced checks).

A graph's ops state relations between the sizes it mentions: a reshape keeps the product of each
group of merged or split dims (``768 -> (12, 64)``), concat and split sizes add up, a slice has
``start + length = end`` and ends inside its dim, an integer constant that indexes a tensor has
dims below the indexed size (so the leading block of an ``arange`` stays in range), a shard or collective multiplies or divides by
its device count, grouped attention needs kv heads dividing q heads. `size_relations` collects
them; `solve_sizes` finds a *size map* ``sigma`` (real size -> reduced size) that keeps every one
of them and is

* injective: distinct sizes stay distinct, ``sigma(0) = 0`` and ``sigma(1) = 1``, so no size
  becomes 1 and broadcasting is unchanged; and ``sigma(n) <= n``;
* the identity on *pinned* sizes: those of strided slices, conv and pooling windows and spatial
  dims, opaque nodes and ops with no known size relations.

The order of unrelated sizes is not kept (a sequence length of 1024 may shrink below a head
size of 64): no op's semantics depend on it, and keeping it would tie every size to every other.

The solver works on *classes*: sizes joined by a sum relation scale by one common factor
(``sigma(n) = f * n``), so sums hold by construction; a product relation is an equation between
class factors. A depth-first search assigns factors class by class (classes in product,
divisibility or order relations first), each class the smallest factor whose sizes collide with
no size assigned so far, within a budget; past it, the classes in product relations are pinned
and the search reruns, and in the worst case ``sigma`` is the identity (always valid).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import NamedTuple

from rewrite.ir import Graph, Node
from rewrite.ops import get_op
from rewrite.verify.sources import const_index_bounds, is_int

__all__ = ["Relation", "SizeRelations", "size_relations", "solve_sizes"]

#: Op families whose shapes relate only by equality and broadcasting.
_PLAIN_FAMILIES = frozenset({"elementwise", "matmul", "reduction", "norm", "source"})
_PLAIN_OPS = frozenset(
    {"permute", "transpose", "index_select", "embedding", "expand", "all_reduce", "assume"}
)
#: Search effort (candidate factors tried) before the product classes are pinned.
_BUDGET = 20_000


class Relation(NamedTuple):
    """One relation between sizes.

    Attributes:
        kind: ``"prod"`` (product of ``lhs`` = product of ``rhs``), ``"sum"`` (sum of ``lhs`` =
            ``rhs[0]``), ``"div"`` (``lhs[0]`` divides ``rhs[0]``) or ``"lt"``
            (``lhs[0] < rhs[0]``).
        lhs: Sizes on the left, sorted.
        rhs: Sizes on the right, sorted.
    """

    kind: str
    lhs: tuple[int, ...]
    rhs: tuple[int, ...]


class SizeRelations(NamedTuple):
    """What `size_relations` finds in a graph."""

    sizes: frozenset[int]
    relations: frozenset[Relation]
    pinned: frozenset[int]

    def merge(self, other: SizeRelations) -> SizeRelations:
        """The relations of both graphs (checked together)."""
        return SizeRelations(
            self.sizes | other.sizes,
            self.relations | other.relations,
            self.pinned | other.pinned,
        )


_memo: OrderedDict[str, SizeRelations] = OrderedDict()


def size_relations(graph: Graph) -> SizeRelations:
    """Every size ``graph`` mentions, the relations its ops state, and the pinned sizes.

    Memoized by graph hash (fused bodies included).
    """
    hit = _memo.get(graph.hash)
    if hit is not None:
        _memo.move_to_end(graph.hash)
        return hit
    sizes: set[int] = set()
    rels: set[Relation] = set()
    pins: set[int] = set()
    for node in graph:
        for t in (*node.in_types, *node.types):
            sizes.update(t.shape)
        if node.op == "fused":
            inner = size_relations(node.attrs["body"])
            sizes |= inner.sizes
            rels |= inner.relations
            pins |= inner.pinned
        else:
            _node_relations(node, rels, pins)
    if any(is_int(graph.node(i).type.dtype) for i in graph.by_op("const")):
        for nid, bound in const_index_bounds(graph).items():
            # an index constant's leading block (an arange of positions, say) stays in bounds
            # when its dims stay below the indexed size
            rels.update(
                Relation("lt", (d,), (bound,)) for d in graph.node(nid).type.shape if d < bound
            )
    sizes |= pins
    for r in rels:
        sizes.update((*r.lhs, *r.rhs))
    out = _memo[graph.hash] = SizeRelations(frozenset(sizes), frozenset(rels), frozenset(pins))
    if len(_memo) > 2048:
        _memo.popitem(last=False)
    return out


def _prod(lhs: Iterable[int], rhs: Iterable[int]) -> Relation | None:
    """``prod(lhs) == prod(rhs)`` with common factors and ones cancelled (None if trivial)."""
    a = sorted(x for x in lhs if x != 1)
    b = sorted(x for x in rhs if x != 1)
    for x in list(a):
        if x in b:
            a.remove(x)
            b.remove(x)
    return Relation("prod", tuple(a), tuple(b)) if a or b else None


def _reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[Relation] | None:
    """Product relations of the dim groups a reshape merges or splits (None: cannot group)."""
    a, b = [d for d in src if d != 1], [d for d in dst if d != 1]
    out: list[Relation] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb, pa, pb = [a[i]], [b[j]], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                ga.append(a[i])
                pa *= a[i]
                i += 1
            elif pb < pa and j < len(b):
                gb.append(b[j])
                pb *= b[j]
                j += 1
            else:
                return None
        rel = _prod(ga, gb)
        if rel is not None:
            out.append(rel)
    return out if i == len(a) and j == len(b) else None


def _node_relations(node: Node, rels: set[Relation], pins: set[int]) -> None:
    """Add the relations ``node`` states between sizes (or pin the sizes it cannot vary)."""
    op, attrs, ins, outs = node.op, node.attrs, node.in_types, node.types
    every = [d for t in (*ins, *outs) for d in t.shape]
    if any(t.numel == 0 for t in (*ins, *outs)):
        pins.update(every)
    elif op == "reshape":
        groups = _reshape_groups(ins[0].shape, outs[0].shape)
        if groups is None:
            pins.update(every)
        else:
            rels.update(groups)
    elif op == "slice":
        start, end, step = attrs["start"], attrs["end"], attrs["step"]
        n, size = outs[0].shape[attrs["dim"]], ins[0].shape[attrs["dim"]]
        if step != 1:
            pins.update((start, end, n, step, size))
            return
        rels.add(Relation("sum", tuple(sorted(x for x in (start, n) if x)), (end,)))
        if end < size:
            rels.add(Relation("lt", (end,), (size,)))
    elif op in ("split", "concat"):
        d = attrs["dim"]
        parts = [t.shape[d] for t in (outs if op == "split" else ins)]
        total = (ins if op == "split" else outs)[0].shape[d]
        rels.add(Relation("sum", tuple(sorted(p for p in parts if p)), (total,)))
    elif op in ("shard", "reduce_scatter", "all_gather"):
        n = attrs["n"] if op == "shard" else len(ins)
        d = attrs["dim"]
        big, small = (outs, ins) if op == "all_gather" else (ins, outs)
        pins.add(n)
        rel = _prod((big[0].shape[d],), (n, small[0].shape[d]))
        if rel is not None:
            rels.add(rel)
    elif op == "sdpa":
        q, k = ins[0], ins[1]
        if attrs["enable_gqa"] and q.rank >= 3 and q.shape[-3] != k.shape[-3]:
            rels.add(Relation("div", (k.shape[-3],), (q.shape[-3],)))
    elif op == "conv2d":
        w = ins[1]
        pins.update((*ins[0].shape[2:], *w.shape[2:], *outs[0].shape[2:]))
        if attrs["groups"] != 1:
            pins.update((attrs["groups"], ins[0].shape[1], *w.shape[:2]))
    elif op in ("avg_pool2d", "max_pool2d"):
        pins.update((*ins[0].shape[2:], *outs[0].shape[2:]))
    elif op == "diagonal":  # the main diagonal of a square pair of dims: sizes stay equal
        shape = ins[0].shape
        if attrs["offset"] != 0 or shape[attrs["dim1"]] != shape[attrs["dim2"]]:
            pins.update(every)
    elif op not in _PLAIN_OPS and get_op(op).family not in _PLAIN_FAMILIES:
        pins.update(every)  # opaque nodes and ops without known size relations


# ---------------------------------------------------------------------- solving
class _Problem:
    """Classes of sizes (joined by sums), their factor equations, and the search state."""

    def __init__(self, rel: SizeRelations, pin_products: bool) -> None:
        numbers = sorted(n for n in rel.sizes | {1} if n > 0)
        parent = {n: n for n in numbers}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for r in rel.relations:
            if r.kind == "sum":
                members = [x for x in (*r.lhs, *r.rhs) if x > 0]
                for x in members[1:]:
                    parent[find(x)] = find(members[0])
        self.cls = {n: find(n) for n in numbers}
        self.members: dict[int, list[int]] = {}
        for n in numbers:
            self.members.setdefault(self.cls[n], []).append(n)
        # sigma(n) = k * n / scale[c] for the class c of n, k in [1, scale[c]]
        self.scale = {c: functools.reduce(math.gcd, ms) for c, ms in self.members.items()}
        self.equations: list[dict[int, int]] = []
        for r in rel.relations:
            if r.kind == "prod":
                exps: dict[int, int] = {}
                for x, e in [(x, 1) for x in r.lhs] + [(x, -1) for x in r.rhs]:
                    exps[self.cls[x]] = exps.get(self.cls[x], 0) + e
                if any(exps.values()):
                    self.equations.append({c: e for c, e in exps.items() if e})
        self.order_rels = [r for r in rel.relations if r.kind in ("div", "lt")]
        pinned = {self.cls[n] for n in rel.pinned | {1} if n in self.cls}
        if pin_products:
            pinned |= {c for eq in self.equations for c in eq}
        self.eqs_of: dict[int, list[dict[int, int]]] = {}
        for eq in self.equations:
            for c in eq:
                self.eqs_of.setdefault(c, []).append(eq)
        linked = set(self.eqs_of) | {self.cls[x] for r in self.order_rels for x in (*r.lhs, *r.rhs)}
        free = [c for c in self.members if c not in pinned]
        self.order = sorted(free, key=lambda c: (c not in linked, min(self.members[c])))
        self.rels_of: dict[int, list[Relation]] = {}
        for r in self.order_rels:
            for x in (*r.lhs, *r.rhs):
                self.rels_of.setdefault(self.cls[x], []).append(r)
        self.k: dict[int, int] = {}
        self.value: dict[int, int] = {0: 0}
        self.owner: dict[int, int] = {0: -1}  # reduced value -> class holding it
        for c in pinned:
            self._set(c, self.scale[c])
        self.tries = 0

    def _set(self, c: int, k: int | None) -> None:
        for n in self.members[c]:
            if k is None:
                del self.owner[self.value.pop(n)]
            else:
                self.value[n] = k * n // self.scale[c]
                self.owner[self.value[n]] = c
        if k is None:
            del self.k[c]
        else:
            self.k[c] = k

    def _factor(self, c: int) -> Fraction:
        return Fraction(self.k[c], self.scale[c])

    def _forced(self, c: int) -> tuple[Fraction | None, set[int], bool]:
        """``(factor, classes, ok)``: the factor of class ``c`` its assigned equations force
        (None: free), the classes that forced it, and False on contradicting equations."""
        want: Fraction | None = None
        why: set[int] = set()
        for eq in self.eqs_of.get(c, ()):
            if any(o not in self.k for o in eq if o != c):
                continue
            rest = Fraction(1)
            for o, e in eq.items():
                if o != c:
                    rest *= self._factor(o) ** e
            why |= set(eq) - {c}
            if abs(eq[c]) != 1 or (want is not None and rest ** (-eq[c]) != want):
                return None, why, False
            want = rest ** (-eq[c])
        return want, why, True

    def _broken(self, c: int) -> set[int] | None:
        """The other classes of the assigned equations and order relations of ``c`` that
        fail (None when none fails)."""
        bad: set[int] = set()
        broken = False
        for eq in self.eqs_of.get(c, ()):
            if all(o in self.k for o in eq):
                f = Fraction(1)
                for o, e in eq.items():
                    f *= self._factor(o) ** e
                if f != 1:
                    bad |= set(eq)
                    broken = True
        for r in self.rels_of.get(c, ()):
            a, b = self.value.get(r.lhs[0]), self.value.get(r.rhs[0])
            if a is None or b is None:
                continue
            if (r.kind == "div" and b % a) or (r.kind == "lt" and a >= b):
                bad |= {self.cls[r.lhs[0]], self.cls[r.rhs[0]]}
                broken = True
        return bad - {c} if broken else None

    def _next(self) -> int | None:
        """The next class to assign: one an equation forces if any, else the first free one."""
        first = None
        for c in self.order:
            if c in self.k:
                continue
            for eq in self.eqs_of.get(c, ()):
                if all(o in self.k for o in eq if o != c):
                    return c
            first = c if first is None else first
        return first

    def search(self) -> set[int] | None:
        """Assign the remaining classes depth first (forced classes first) with
        conflict-directed backjumping.

        Returns:
            None on success, else the conflict set: the assigned classes whose values made
            the search fail (a caller not in it is skipped over).

        Raises:
            _OutOfBudget: Past `_BUDGET` candidate factors.
        """
        c = self._next()
        if c is None:
            return None
        ms, big = self.members[c], self.scale[c]
        forced, conflict, ok = self._forced(c)
        cands: Iterable[int] = ()
        if ok and forced is None:
            cands = range(1, big + 1)
        elif ok and forced is not None and (forced * big).denominator == 1:
            cands = (int(forced * big),) if 1 <= forced * big <= big else ()
        for k in cands:
            self.tries += 1
            if self.tries > _BUDGET:
                raise _OutOfBudget
            clash = {self.owner[v] for v in (k * n // big for n in ms) if v in self.owner}
            if clash:
                conflict |= clash
                continue
            self._set(c, k)
            bad = self._broken(c)
            sub = self.search() if bad is None else bad
            if sub is None:
                return None
            self._set(c, None)
            if bad is None and c not in sub:
                return sub  # the failure below does not depend on c: jump over it
            conflict |= sub - {c}
        return conflict


class _OutOfBudget(Exception):
    """The size-map search tried `_BUDGET` factors."""


def solve_sizes(rel: SizeRelations) -> dict[int, int]:
    """A size map keeping every relation of ``rel`` (see the module docstring).

    Args:
        rel: Sizes, relations and pinned sizes (`size_relations`, merged over the graphs
            checked together).

    Returns:
        ``{size: reduced size}`` for every size of ``rel`` plus 0 and 1 (the identity on
        everything when no reduction keeps the relations).
    """
    return dict(_solve(rel))


@functools.lru_cache(maxsize=1024)
def _solve(rel: SizeRelations) -> tuple[tuple[int, int], ...]:
    for pin_products in (False, True):
        p = _Problem(rel, pin_products)
        try:
            found = p.search() is None
        except _OutOfBudget:
            found = False
        if found and valid_size_map(p.value, rel):
            return tuple(sorted(p.value.items()))
    return tuple((n, n) for n in sorted(rel.sizes | {0, 1}))


def valid_size_map(sigma: Mapping[int, int], rel: SizeRelations) -> bool:
    """Whether ``sigma`` is injective, never grows a size, keeps 0, 1 and the pinned sizes,
    and keeps every relation of ``rel``."""
    sig = {0: 0, 1: 1, **sigma}
    if len(set(sig.values())) != len(sig) or sig[0] != 0 or sig[1] != 1:
        return False
    if any(not 0 < sig[n] <= n for n in sig if n) or any(sig[n] != n for n in rel.pinned):
        return False
    return all(_relation_holds(r, sig) for r in rel.relations)


def _relation_holds(r: Relation, sig: Mapping[int, int]) -> bool:
    a, b = [sig[x] for x in r.lhs], [sig[x] for x in r.rhs]
    if r.kind == "prod":
        return math.prod(a) == math.prod(b)
    if r.kind == "sum":
        return sum(a) == b[0]
    if r.kind == "div":
        return b[0] % a[0] == 0
    return a[0] < b[0]
