"""The `Rule` record: a rewrite rule as data, with matching and application.

A rule is a pattern (one or more roots, see `rewrite.rules.pattern`), a precondition on the
match, a replacement builder, and metadata: family, the objectives it trades, its direction and
inverse, and a sample-graph generator that the z3 prover, the random tester and the tests
instantiate it on. The search, the prover, the verifier and `docs/rules.md` all read the same
`Rule` objects.

Contract of the callables (all pure; they must not mutate the graph):

* ``pre(m: Match) -> bool``: shape/attr condition on a match.
* ``build(ed: GraphEditor, m: Match) -> Sequence[Value]``: adds the replacement nodes through
  ``ed`` and returns one new value per root, in root order (the output mapping). `Rule.apply`
  then redirects every reader of root ``i`` to new value ``i``.
* ``sample(dims: Dims) -> Graph``: a small graph holding at least one site of the rule, with
  sizes drawn from ``dims`` (tiny for z3 proofs, larger for random tests).

Thread-safety: rules are immutable; `matches` and `apply` may run concurrently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from rewrite.builder import GraphEditor
from rewrite.errors import MatchError, RuleError
from rewrite.ir import Graph, Value
from rewrite.rules.pattern import Match, P, is_exclusive, match_roots, pattern_ops

__all__ = ["FAMILIES", "OBJECTIVES", "Dims", "Rule", "Site"]

#: Rule families.
FAMILIES = ("algebra", "merging", "fusion", "memory", "folding", "sharding")
#: Objective tags (short letter used in docs): compute C, memory traffic M, peak memory P,
#: kernel count K, communication X.
OBJECTIVES = {
    "compute": "C",
    "memory": "M",
    "peak_memory": "P",
    "kernels": "K",
    "communication": "X",
}
_EFFECTS = ("-", "+", "~")


class Dims:
    """Draws the sizes of a sample graph.

    Args:
        rng: Random generator.
        lo: Smallest size drawn.
        hi: Largest size drawn (inclusive).
        shards: Shard count sharding rules must divide by.
    """

    def __init__(self, rng: np.random.Generator, lo: int = 2, hi: int = 8, shards: int = 2) -> None:
        if not 1 <= lo <= hi:
            raise RuleError(f"`1 <= lo <= hi` must hold, but got ({lo=}, {hi=}).")
        self.rng, self.lo, self.hi, self.shards = rng, lo, hi, shards

    def __call__(self) -> int:
        """A size in ``[lo, hi]``."""
        return int(self.rng.integers(self.lo, self.hi + 1))

    def mult(self, n: int) -> int:
        """A multiple of ``n`` near the size range (at least ``n``)."""
        return n * max(1, self() // n)

    @property
    def is_tiny(self) -> bool:
        """Whether these are proof-sized dims (``hi <= 3``)."""
        return self.hi <= 3


@dataclass(frozen=True)
class Site:
    """One place a rule applies: the rule name, the root values and the bindings.

    Sites are hashable and tied to the graph they were found in (apply them to that graph or to
    a graph that still holds the same nodes).
    """

    rule: str
    roots: tuple[Value, ...]
    env: tuple[tuple[str, Value], ...]
    nodes: frozenset[int] = field(compare=False)

    @property
    def anchor(self) -> int:
        """Node id of the first root."""
        return self.roots[0].node


@dataclass(frozen=True, eq=False)
class Rule:
    """A rewrite rule (see the module docstring for the callables' contracts).

    Attributes:
        name: Unique name (``snake_case``).
        family: One of `FAMILIES`.
        pattern: Root patterns; the first root anchors matching.
        build: Replacement builder ``(editor, match) -> new values, one per root``.
        sample: Sample-graph generator ``(dims) -> Graph`` holding a site.
        trades: Objective tag (a key of `OBJECTIVES`) -> ``"-"`` (improves), ``"+"`` (worsens)
            or ``"~"`` (depends on shapes).
        doc: One sentence stating the rewrite, e.g. ``"(AB)C -> A(BC)"``.
        pre: Precondition on a match; None accepts every match.
        inverse: Name of the rule undoing this one, if shipped.
        direction: ``"forward"``, ``"backward"`` (the inverse of a forward rule) or
            ``"one-way"``.
        exclusive: Require matched non-root nodes to have no users outside the match.
        symmetric: The roots are interchangeable (report each unordered match once).
        exact: The finite-field check applies (False: float mode with tolerances).
        extra_nodes: Nodes a rewrite at a match reads beyond the matched ones (e.g. the
            producer a fusion absorbs), so region checks cut them out too; None for none.
        multi_output: The single root is a multi-output node and ``build`` returns one value
            per output of it (e.g. ``split``).
        version: Bump when the rule's semantics change (part of the fingerprint).
    """

    name: str
    family: str
    pattern: tuple[P, ...]
    build: Callable[[GraphEditor, Match], Sequence[Value]]
    sample: Callable[[Dims], Graph]
    trades: dict[str, str]
    doc: str
    pre: Callable[[Match], bool] | None = None
    inverse: str | None = None
    direction: str = "one-way"
    exclusive: bool = True
    symmetric: bool = False
    exact: bool = True
    multi_output: bool = False
    extra_nodes: Callable[[Match], Iterable[int]] | None = None
    version: int = 1

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").isalnum():
            raise RuleError(f"rule names must be snake_case identifiers, but got {self.name!r}.")
        if self.family not in FAMILIES:
            raise RuleError(
                f"rule {self.name!r}: family must be one of {FAMILIES}, but got {self.family!r}."
            )
        if not self.pattern or not all(isinstance(p, P) for p in self.pattern):
            raise RuleError(
                f"rule {self.name!r}: pattern must be a non-empty tuple of P roots, got {self.pattern!r}."
            )
        bad = {k: v for k, v in self.trades.items() if k not in OBJECTIVES or v not in _EFFECTS}
        if bad or not self.trades:
            raise RuleError(
                f"rule {self.name!r}: trades must map objectives {sorted(OBJECTIVES)} to one of "
                f"{_EFFECTS}, but got {self.trades!r}."
            )
        if self.direction not in ("forward", "backward", "one-way"):
            raise RuleError(
                f"rule {self.name!r}: direction must be forward, backward or one-way, got {self.direction!r}."
            )

    # ------------------------------------------------------------------ matching
    @property
    def anchor_ops(self) -> tuple[str, ...]:
        """Op names the first root can have (the matching index keys)."""
        return self.pattern[0].ops

    @property
    def ops(self) -> frozenset[str]:
        """Every op the pattern mentions."""
        out: set[str] = set()
        for p in self.pattern:
            out |= pattern_ops(p)
        return frozenset(out)

    def matches_at(self, graph: Graph, anchor: int) -> Iterator[Site]:
        """Every site whose first root is node ``anchor``."""
        ordered = self.symmetric
        for env, roots, nodes in match_roots(graph, self.pattern, anchor, ordered):
            if self.exclusive and len(nodes) > len(roots) and not is_exclusive(graph, nodes, roots):
                continue
            if self.pre is not None and not self.pre(Match(graph, env, roots, nodes)):
                continue
            yield Site(self.name, roots, tuple(sorted(env.items())), nodes)

    def matches(self, graph: Graph) -> list[Site]:
        """Every site of this rule in ``graph``, in topological order of the anchor."""
        out: list[Site] = []
        for op in self.anchor_ops:
            for nid in graph.by_op(op):
                out.extend(self.matches_at(graph, nid))
        return out

    def match_of(self, graph: Graph, site: Site) -> Match:
        """The `Match` behind ``site``, re-checked against ``graph``.

        Raises:
            MatchError: If the site is not (or no longer) a site of this rule in ``graph``.
        """
        if site.rule != self.name:
            raise MatchError(
                f"site belongs to rule {site.rule!r}, but was applied with {self.name!r}."
            )
        if site.anchor in graph.nodes:
            for env, roots, nodes in match_roots(graph, self.pattern, site.anchor, self.symmetric):
                if roots == site.roots and tuple(sorted(env.items())) == site.env:
                    return Match(graph, env, roots, nodes)
        raise MatchError(
            f"site {site.roots} of rule {self.name!r} does not match graph {graph!r}; find sites "
            "with rule.matches(graph) on the graph you apply them to."
        )

    # ------------------------------------------------------------------ rewriting
    def apply(self, graph: Graph, site: Site) -> Graph:
        """The graph with ``site`` rewritten; it shares every unchanged node with ``graph``.

        Raises:
            MatchError: If ``site`` does not match ``graph``.
            RuleError: If the builder returns the wrong number of values.
        """
        m = self.match_of(graph, site)
        ed = GraphEditor(graph)
        new = list(self.build(ed, m))
        olds = self.replaced_values(m)
        if len(new) != len(olds):
            raise RuleError(
                f"rule {self.name!r}: build must return one value per replaced value ({len(olds)}), "
                f"but returned {len(new)}."
            )
        for old, v in zip(olds, new):
            ed.replace(old, v)
        return ed.finish()

    def region_nodes(self, m: Match) -> frozenset[int]:
        """Ids of the nodes a rewrite at ``m`` reads: the matched ones plus `extra_nodes`."""
        if self.extra_nodes is None:
            return m.nodes
        return m.nodes | frozenset(self.extra_nodes(m))

    def replaced_values(self, m: Match) -> list[Value]:
        """The values a rewrite at ``m`` replaces (the output mapping's domain), in order."""
        if self.multi_output:
            return list(m.root_node().outs)
        return list(m.roots)

    # ------------------------------------------------------------------ identity
    def sample_graph(self, rng: np.random.Generator | int, *, lo: int = 2, hi: int = 8) -> Graph:
        """A sample graph holding a site, sizes drawn in ``[lo, hi]``.

        Raises:
            RuleError: If the generated graph holds no site of the rule.
        """
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        g = self.sample(Dims(rng, lo, hi))
        if not self.matches(g):
            raise RuleError(
                f"rule {self.name!r}: its sample graph holds no site; fix sample() or the pattern."
            )
        return g

    def fingerprint(self, shapes_seed: int = 0) -> str:
        """Content hash of the rule: name, version, and its proof instance before and after.

        Two rules with the same fingerprint rewrite the proof-sized sample identically, so a
        cached verdict keyed by it stays valid while the pattern or builder is unchanged.
        """
        g = self.sample_graph(shapes_seed, lo=1, hi=3)
        h = hashlib.blake2b(f"{self.name}|{self.version}|{self.exact}".encode(), digest_size=16)
        h.update(g.digest)
        for site in self.matches(g):
            h.update(self.apply(g, site).digest)
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, family={self.family!r})"
