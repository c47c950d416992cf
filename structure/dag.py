"""The learned structure: a tiered DAG over parameters, metrics and objectives, plus knowledge.

Everything here is plain data that serializes to JSON (`Structure.to_dict` /
`Structure.from_dict`), is validated once in ``__post_init__`` and then trusted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import networkx as nx
import torch
from torch import Tensor

from structure.errors import KnowledgeError, StructureError, StructureFormatError

__all__ = ["FORMAT_VERSION", "TIERS", "Edge", "Formula", "Knowledge", "Structure"]

FORMAT_VERSION = 1
"""Version of the JSON layout written by `Structure.to_dict`."""

TIERS = ("param", "metric", "objective")
"""Tier names, in causal order: edges only go from a lower tier to a higher or the same tier."""

_ORIGINS = ("learned", "required", "repaired", "direct")
_TRANSFORMS = ("identity", "log1p", "neglog1p")


def to_model(transform: str | None, raw: Tensor) -> Tensor:
    """A node's modelled value from its raw value: ``log1p(raw)`` (``"log1p"``, for
    non-negative counts and times), ``log1p(-raw)`` (``"neglog1p"``, for a minimized time or
    count in the tuner's maximization convention, which is non-positive) or ``raw``."""
    if transform == "log1p":
        return torch.log1p(raw.clamp_min(0.0))
    if transform == "neglog1p":
        return torch.log1p((-raw).clamp_min(0.0))
    return raw


def to_raw(transform: str | None, value: Tensor) -> Tensor:
    """The inverse of `to_model`."""
    if transform == "log1p":
        return torch.expm1(value)
    if transform == "neglog1p":
        return -torch.expm1(value)
    return value


def raw_moments(transform: str | None, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance in raw units of a node whose modelled value is ``N(mean, var)``
    (log-normal moments under a log transform; the variance is capped at 20 in model units)."""
    if transform not in ("log1p", "neglog1p"):
        return mean, var
    var = var.clamp(0.0, 20.0)
    raw_mean = torch.exp(mean + var / 2) - 1.0
    raw_var = torch.expm1(var) * torch.exp(2 * mean + var)
    return (raw_mean if transform == "log1p" else -raw_mean), raw_var


@dataclass(frozen=True)
class Edge:
    """A directed edge of the structure.

    Attributes:
        source: Name of the parent node.
        target: Name of the child node.
        strength: How strongly the data supports the edge, in ``[0, 1]``: for an edge PC found,
            the fraction of bootstrap resamples with the adjacency; for a parent chosen by GP
            selection (`structure.select`), its share of the leave-one-out gain of the node's
            inputs; 1.0 for required edges, 0.0 for repair and direct edges.
        origin: ``"learned"`` (found in the data), ``"required"`` (expert knowledge or formula),
            ``"repaired"`` (added so that a parameter keeps a path to an objective) or
            ``"direct"`` (a parameter -> objective edge kept by ``LearnConfig.direct_edges``).
    """

    source: str
    target: str
    strength: float = 1.0
    origin: str = "learned"

    def __post_init__(self) -> None:
        if not (isinstance(self.source, str) and isinstance(self.target, str)):
            raise StructureError(
                f"Edge ends must be node names, got {self.source!r} -> {self.target!r}."
            )
        real = isinstance(self.strength, int | float) and not isinstance(self.strength, bool)
        if not real or not 0.0 <= self.strength <= 1.0:
            raise StructureError(f"Edge strength must lie in [0, 1], but got {self.strength=}.")
        if self.origin not in _ORIGINS:
            raise StructureError(f"Edge origin must be one of {_ORIGINS}, got {self.origin=}.")
        if self.source == self.target:
            raise StructureError(f"Self-loops are not allowed, got {self.source!r} -> itself.")


@dataclass(frozen=True)
class Formula:
    """A known relation: a node that is a deterministic function of other nodes.

    ``op="sum"``: ``node = scale * sum_i weights[i] * inputs[i]``;
    ``op="product"``: ``node = scale * prod_i inputs[i] ** weights[i]``.
    The formula reads and writes raw values (before any log transform of the featurization);
    objectives are in the maximization convention, so a minimized objective needs ``scale=-1``.
    With ``residual=True`` a GP over the parameters models ``observed - formula``.

    Attributes:
        node: The node the formula defines (a metric or an objective).
        inputs: The nodes it reads: metrics or objectives. Not parameters: the network
            models how a node depends on parameters with a GP on them (``residual=True``, or a
            required edge from the parameter).
        op: ``"sum"`` or ``"product"``.
        weights: Coefficients (sum) or exponents (product), one per input; all 1.0 by default.
        scale: Factor applied to the result.
        residual: Whether to fit a GP on the residual.
    """

    node: str
    inputs: tuple[str, ...]
    op: str = "sum"
    weights: tuple[float, ...] | None = None
    scale: float = 1.0
    residual: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if self.op not in ("sum", "product"):
            raise KnowledgeError(f"Formula op must be 'sum' or 'product', got {self.op=}.")
        if not self.inputs or self.node in self.inputs:
            raise KnowledgeError(
                f"A formula needs inputs other than its node, got {self.node=}, {self.inputs=}."
            )
        if self.weights is not None:
            bad = [w for w in self.weights if isinstance(w, bool) or not isinstance(w, Real)]
            if bad:
                raise KnowledgeError(
                    f"Formula {self.node!r} weights must be numbers, got {self.weights!r}."
                )
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
            if len(self.weights) != len(self.inputs):
                raise KnowledgeError(
                    f"One weight per input is needed, got {len(self.weights)} weights for "
                    f"{len(self.inputs)} inputs of formula {self.node!r}."
                )

    def evaluate(self, values: Sequence[Tensor]) -> Tensor:
        """Evaluate the formula on raw input values.

        Args:
            values: One Tensor per input, all of one broadcastable shape ``...``.

        Returns:
            A ``...``-dim Tensor with the node's raw value.
        """
        weights = self.weights or (1.0,) * len(self.inputs)
        out = torch.as_tensor(0.0 if self.op == "sum" else 1.0, dtype=values[0].dtype)
        for w, v in zip(weights, values):
            out = out + w * v if self.op == "sum" else out * v.clamp_min(1e-12) ** w
        return self.scale * out


@dataclass(frozen=True)
class Knowledge:
    """Expert knowledge given to structure learning.

    Attributes:
        required: ``(source, target)`` edges that must be in the structure.
        forbidden: ``(source, target)`` edges that must not be.
        formulas: Known relations (`Formula`); their inputs become required parents.
        phase_order: Metric-name prefixes in the search's phase order, earliest first. An
            edge between two metrics that the data cannot orient points from the earlier phase
            to the later one.
        candidates: ``(source, target)`` edges that are likely but not certain, such as a
            rule's prior -> that rule's counters: soft knowledge that structure learning tries
            first and keeps only where the data supports it (`structure.learn`). A metric they
            name stays a column of its own (not summed into a counter family,
            `structure.features`); a name no trial reports is ignored.
    """

    required: tuple[tuple[str, str], ...] = ()
    forbidden: tuple[tuple[str, str], ...] = ()
    formulas: tuple[Formula, ...] = ()
    phase_order: tuple[str, ...] = ()
    candidates: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("required", "forbidden", "candidates"):
            object.__setattr__(self, name, _edge_pairs(name, getattr(self, name)))
        formulas = _sequence("formulas", self.formulas, "Formula objects")
        bad = [f for f in formulas if not isinstance(f, Formula)]
        if bad:
            raise KnowledgeError(
                f"Knowledge formulas must be Formula objects, got {bad[0]!r}; build them as "
                "Formula(node, inputs, ...) (Knowledge.from_dict reads the dict form)."
            )
        object.__setattr__(self, "formulas", formulas)
        order = _sequence("phase_order", self.phase_order, "metric-name prefixes")
        if not all(isinstance(p, str) for p in order):
            raise KnowledgeError(f"Knowledge phase_order must hold strings, got {order!r}.")
        object.__setattr__(self, "phase_order", order)
        clash = set(self.required) & set(self.forbidden)
        if clash:
            raise KnowledgeError(f"Edges cannot be both required and forbidden: {sorted(clash)}.")
        clash = set(self.candidates) & set(self.forbidden)
        if clash:
            raise KnowledgeError(
                f"Knowledge edges cannot be both candidates and forbidden: {sorted(clash)}; drop "
                "them from one of the two."
            )
        nodes = [f.node for f in self.formulas]
        if len(set(nodes)) != len(nodes):
            raise KnowledgeError(f"At most one formula per node, got nodes {nodes}.")

    def phase_rank(self, name: str) -> int | None:
        """Index of the first `phase_order` prefix that `name` starts with, or None."""
        for rank, prefix in enumerate(self.phase_order):
            if name.startswith(prefix):
                return rank
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "required": [list(e) for e in self.required],
            "forbidden": [list(e) for e in self.forbidden],
            "formulas": [_formula_to_dict(f) for f in self.formulas],
            "phase_order": list(self.phase_order),
            "candidates": [list(e) for e in self.candidates],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knowledge:
        """Inverse of `to_dict`."""
        formulas = _sequence("formulas", d.get("formulas", ()), "formula dicts")
        if not all(isinstance(f, Mapping) for f in formulas):
            raise KnowledgeError(f"Knowledge formulas must be dicts here, got {formulas!r}.")
        return cls(
            required=d.get("required", ()),
            forbidden=d.get("forbidden", ()),
            formulas=tuple(_formula_from_dict(f) for f in formulas),
            phase_order=d.get("phase_order", ()),
            candidates=d.get("candidates", ()),
        )


def _sequence(field_name: str, value: Any, what: str) -> tuple[Any, ...]:
    """`value` as a tuple; a bare string is refused (it would be read letter by letter)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise KnowledgeError(
            f"Knowledge {field_name} must be a list of {what}, got {value!r}; wrap a single "
            f"one in a list, e.g. {field_name}=[...]."
        )
    return tuple(value)


def _edge_pairs(field_name: str, value: Any) -> tuple[tuple[str, str], ...]:
    pairs = _sequence(field_name, value, "(source, target) name pairs")
    for pair in pairs:
        ok = isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2
        if not ok or not all(isinstance(n, str) and n for n in pair):
            raise KnowledgeError(
                f"Knowledge {field_name} must hold (source, target) pairs of node names, got "
                f"{pair!r} in {value!r}; e.g. {field_name}=[('population', 'search.steps')]."
            )
    return tuple((s, t) for s, t in pairs)


@dataclass(frozen=True)
class Structure:
    """A DAG under tiers: parameters -> metrics -> objectives.

    No edge enters a parameter, none leaves an objective, no edge joins two parameters or two
    objectives. Metric nodes include the outcome-constraint metrics the tuner models.

    Attributes:
        params: Parameter node names (one node per `spaces` parameter, all its columns).
        metrics: Metric node names (featurized tracking metrics and constraint outcomes).
        objectives: Objective node names, in outcome order.
        edges: The directed edges.
        formulas: Formula nodes (each formula's inputs are parents of its node).
        transforms: Node -> ``"identity"``, ``"log1p"`` or ``"neglog1p"`` (`to_model`): how
            the node's modelled value
            relates to its raw value (formulas read raw values); identity when absent.
        n_trials: Number of trials the structure was learned from (0: a given structure,
            not learned).
        format_version: Version of the stored layout.
    """

    params: tuple[str, ...]
    metrics: tuple[str, ...]
    objectives: tuple[str, ...]
    edges: tuple[Edge, ...]
    formulas: tuple[Formula, ...] = ()
    transforms: Mapping[str, str] = field(default_factory=dict)
    n_trials: int = 0
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        for name in ("params", "metrics", "objectives", "edges", "formulas"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "transforms", dict(self.transforms))
        self._validate()

    def _validate(self) -> None:
        nodes = self.nodes
        if len(set(nodes)) != len(nodes):
            raise StructureError(f"Node names must be unique across tiers, got {nodes}.")
        tier = self.tier_of
        seen: set[tuple[str, str]] = set()
        for e in self.edges:
            if e.source not in tier or e.target not in tier:
                raise StructureError(f"Edge {e.source!r} -> {e.target!r} names an unknown node.")
            if (e.source, e.target) in seen:
                raise StructureError(f"Duplicate edge {e.source!r} -> {e.target!r}.")
            seen.add((e.source, e.target))
            ts, tt = tier[e.source], tier[e.target]
            if tt == "param" or ts == "objective" or (ts == tt and ts != "metric"):
                raise StructureError(
                    f"Tier rule broken by {e.source!r} ({ts}) -> {e.target!r} ({tt}): no edges "
                    "into parameters, out of objectives, or within the parameter/objective tier."
                )
        if not nx.is_directed_acyclic_graph(self.to_networkx()):
            raise StructureError(f"The edges must form a DAG, but contain a cycle: {self.edges}.")
        for f in self.formulas:
            if f.node not in tier or tier[f.node] == "param":
                raise StructureError(f"Formula node {f.node!r} must be a metric or objective.")
            params = [i for i in f.inputs if tier.get(i) == "param"]
            if params:
                raise StructureError(
                    f"Formula {f.node!r} reads parameters {params}; formulas read metrics and "
                    "objectives only (use residual=True for a GP on the parameters)."
                )
            missing = [i for i in f.inputs if (i, f.node) not in seen]
            if missing:
                raise StructureError(f"Formula {f.node!r} inputs {missing} must be its parents.")
        bad = {k: v for k, v in self.transforms.items() if v not in _TRANSFORMS or k not in tier}
        if bad:
            raise StructureError(f"Transforms must map known nodes to {_TRANSFORMS}, got {bad}.")

    @property
    def nodes(self) -> list[str]:
        """All node names: parameters, metrics, objectives."""
        return [*self.params, *self.metrics, *self.objectives]

    @property
    def tier_of(self) -> dict[str, str]:
        """Node name -> tier name."""
        out = dict.fromkeys(self.params, "param")
        out.update(dict.fromkeys(self.metrics, "metric"))
        out.update(dict.fromkeys(self.objectives, "objective"))
        return out

    def parents(self, node: str) -> list[str]:
        """Parents of `node` in node order (parameters first)."""
        sources = {e.source for e in self.edges if e.target == node}
        return [n for n in self.nodes if n in sources]

    def formula_for(self, node: str) -> Formula | None:
        """The formula defining `node`, if any."""
        return next((f for f in self.formulas if f.node == node), None)

    def topological_order(self) -> list[str]:
        """Non-parameter nodes in an order where parents come first (ties in node order)."""
        graph = self.to_networkx()
        rank = {n: i for i, n in enumerate(self.nodes)}
        order = nx.lexicographical_topological_sort(graph, key=rank.__getitem__)
        return [n for n in order if n not in set(self.params)]

    def to_networkx(self) -> nx.DiGraph:
        """The DAG as a `networkx.DiGraph`; node attribute ``tier``, edge attributes as `Edge`."""
        graph = nx.DiGraph()
        for name, tier in self.tier_of.items():
            graph.add_node(name, tier=tier)
        for e in self.edges:
            graph.add_edge(e.source, e.target, strength=e.strength, origin=e.origin)
        return graph

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form with ``format_version``."""
        return {
            "format_version": self.format_version,
            "params": list(self.params),
            "metrics": list(self.metrics),
            "objectives": list(self.objectives),
            "edges": [
                {"source": e.source, "target": e.target, "strength": e.strength, "origin": e.origin}
                for e in self.edges
            ],
            "formulas": [_formula_to_dict(f) for f in self.formulas],
            "transforms": dict(self.transforms),
            "n_trials": self.n_trials,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Structure:
        """Load a structure written by `to_dict` (any past ``format_version``).

        Raises:
            StructureFormatError: The version is newer than this code, or keys are missing.
        """
        version = d.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
            raise StructureFormatError(
                f"Structure format_version must be an int in [1, {FORMAT_VERSION}], but got "
                f"{version!r}; a newer file needs a newer rewrite-tuner (upgrade the package)."
            )
        try:
            return cls(
                params=tuple(d["params"]),
                metrics=tuple(d["metrics"]),
                objectives=tuple(d["objectives"]),
                edges=tuple(Edge(**e) for e in d["edges"]),
                formulas=tuple(_formula_from_dict(f) for f in d.get("formulas", ())),
                transforms=dict(d.get("transforms", {})),
                n_trials=int(d.get("n_trials", 0)),
            )
        except KeyError as err:
            raise StructureFormatError(
                f"Stored structure lacks key {err}; got {sorted(d)}."
            ) from err
        except (TypeError, AttributeError) as err:
            raise StructureFormatError(
                f"Stored structure is malformed ({err}); expected the form Structure.to_dict "
                "writes. Re-learn the structure or restore the file."
            ) from err

    def to_json(self) -> str:
        """`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Structure:
        """Inverse of `to_json`."""
        d = json.loads(text)
        if not isinstance(d, Mapping):
            raise StructureFormatError(
                f"A stored structure is a JSON object, got {type(d).__name__}: {text[:80]!r}."
            )
        return cls.from_dict(d)


def _formula_to_dict(f: Formula) -> dict[str, Any]:
    return {
        "node": f.node,
        "inputs": list(f.inputs),
        "op": f.op,
        "weights": None if f.weights is None else list(f.weights),
        "scale": f.scale,
        "residual": f.residual,
    }


def _formula_from_dict(d: Mapping[str, Any]) -> Formula:
    weights = d.get("weights")
    return Formula(
        node=d["node"],
        inputs=tuple(d["inputs"]),
        op=d.get("op", "sum"),
        weights=None if weights is None else tuple(weights),
        scale=float(d.get("scale", 1.0)),
        residual=bool(d.get("residual", False)),
    )
