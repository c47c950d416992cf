"""The function-network family of `bench_families.py` (``network/<seed>``; see
`benchmarks._families`), and the seeded generator every family draws its members from."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks._structure_problems import Problem
from spaces import Float, Space

__all__ = ["SHAPES", "NetworkSpec", "Node", "evaluate_network", "network_member", "network_spec"]


def _rng(family: str, seed: int) -> np.random.Generator:
    """The generator of member ``seed`` of ``family`` (independent streams per family)."""
    return np.random.default_rng([53, sum(map(ord, family)), seed])


SHAPES = ("chain", "tree", "diamond", "wide")


@dataclass(frozen=True)
class Node:
    """A network node: ``h = mean_i a_i sin(2 pi f_i x_i + phi_i) + sum_p b_p y_p``, then
    ``kind``: ``tanh`` (``tanh(h)``), ``bump`` (``exp(-h^2)``), ``sin`` (``sin(2 h)``) or
    ``prod`` (``y_0 sqrt(x_0) sin(10 x_0)``-like: the first parent times the input term, as in
    Alpine2)."""

    name: str
    inputs: tuple[int, ...]
    parents: tuple[str, ...]
    amps: tuple[float, ...]
    freqs: tuple[float, ...]
    phases: tuple[float, ...]
    links: tuple[float, ...]
    kind: str


@dataclass(frozen=True)
class NetworkSpec:
    """A function network (module docstring): nodes in topological order, the sink last."""

    name: str
    dim: int
    shape: str
    nodes: tuple[Node, ...]
    centre: tuple[float, ...]
    noise: float = 0.0

    @property
    def read(self) -> tuple[int, ...]:
        """The inputs some node reads."""
        return tuple(sorted({i for n in self.nodes for i in n.inputs}))

    def describe(self) -> dict[str, Any]:
        """The member's shape, for result files."""
        return {
            "columns": self.dim,
            "shape": self.shape,
            "nodes": len(self.nodes),
            "unread": self.dim - len(self.read),
            "fan_in": max(len(n.inputs) + len(n.parents) for n in self.nodes),
            "noise": self.noise,
        }


def _node(
    rng: np.random.Generator, name: str, inputs: Sequence[int], parents: Sequence[str]
) -> Node:
    n = len(inputs)
    kinds = ["tanh", "bump", "sin"] + (["prod"] if parents else [])
    return Node(
        name, tuple(int(i) for i in inputs), tuple(parents),
        tuple(float(a) for a in rng.uniform(0.5, 1.5, n)),
        tuple(float(f) for f in rng.uniform(0.3, 1.5, n)),
        tuple(float(p) for p in rng.uniform(0, 2 * math.pi, n)),
        tuple(float(b) for b in rng.choice([-1, 1], len(parents)) * rng.uniform(0.5, 1.5, len(parents))),
        str(rng.choice(kinds)),
    )  # fmt: skip


def network_spec(seed: int) -> NetworkSpec:
    """Member ``network/<seed>`` of the function-network family (module docstring)."""
    rng = _rng("network", seed)
    shape = str(SHAPES[seed % len(SHAPES)])
    dim = int(rng.integers(2, 11))
    n_read = max(2, dim - int(rng.integers(0, dim // 3 + 1)))
    read = [int(i) for i in rng.permutation(dim)[:n_read]]

    def chunk(k: int) -> list[list[int]]:  # the read inputs dealt to k nodes, 1-3 each
        parts: list[list[int]] = [[] for _ in range(k)]
        for j, i in enumerate(read):
            parts[j % k].append(i)
        return [p[:3] or [int(rng.choice(read))] for p in parts]

    nodes: list[Node] = []
    if shape == "chain":
        for j, inputs in enumerate(chunk(int(rng.integers(2, 5)))):
            nodes.append(_node(rng, f"y{j + 1}", inputs, [nodes[-1].name] if nodes else []))
    elif shape == "tree":
        leaves = [_node(rng, f"y{j + 1}", inputs, []) for j, inputs in enumerate(chunk(4))]
        mid = [
            _node(
                rng,
                f"y{5 + j}",
                [int(rng.choice(read))],
                [leaves[2 * j].name, leaves[2 * j + 1].name],
            )
            for j in range(2)
        ]
        nodes = [*leaves, *mid, _node(rng, "y7", [int(rng.choice(read))], [m.name for m in mid])]
    elif shape == "diamond":
        a_in, b_in, c_in = chunk(3)
        a = _node(rng, "y1", a_in, [])
        b, c = _node(rng, "y2", b_in, ["y1"]), _node(rng, "y3", c_in, ["y1"])
        nodes = [a, b, c, _node(rng, "y4", [int(rng.choice(read))], ["y2", "y3"])]
    else:  # wide
        parts = chunk(int(rng.integers(3, 6)))
        nodes = [_node(rng, f"y{j + 1}", inputs, []) for j, inputs in enumerate(parts)]
        nodes.append(
            _node(rng, f"y{len(parts) + 1}", [int(rng.choice(read))], [n.name for n in nodes])
        )
    centre = tuple(float(c) for c in rng.uniform(0.1, 0.9, dim))
    noise = float(rng.choice([0.0, 0.0, 0.01, 0.05]))
    return NetworkSpec(f"network/{seed}", dim, shape, tuple(nodes), centre, noise)


def evaluate_network(
    spec: NetworkSpec, x: np.ndarray, rng: np.random.Generator | None
) -> tuple[dict[str, float], dict[str, float]]:
    """The network at ``x`` (``dim``-dim, in [0, 1]): objectives ``o1`` (the sink) and ``o2 =
    -g``, metrics every other node and ``g``; additive noise ``spec.noise`` when ``rng`` is
    given."""
    y: dict[str, float] = {}
    for n in spec.nodes:
        terms = [
            a * math.sin(2 * math.pi * f * x[i] + p)
            for i, a, f, p in zip(n.inputs, n.amps, n.freqs, n.phases)
        ]
        h = float(np.mean(terms))
        if n.kind == "prod":
            y[n.name] = y[n.parents[0]] * (1.0 + h) + sum(
                b * y[p] for b, p in zip(n.links[1:], n.parents[1:])
            )
            continue
        h += sum(b * y[p] for b, p in zip(n.links, n.parents))
        y[n.name] = {"tanh": math.tanh(h), "bump": math.exp(-(h**2)), "sin": math.sin(2 * h)}[
            n.kind
        ]
    read = list(spec.read)
    y["g"] = float(np.mean([(x[i] - spec.centre[i]) ** 2 for i in read]))
    if rng is not None and spec.noise > 0:
        y = {k: v + spec.noise * float(rng.standard_normal()) for k, v in y.items()}
    sink = spec.nodes[-1].name
    return {"o1": y[sink], "o2": -y["g"]}, {k: v for k, v in y.items() if k != sink}  # fmt: skip


def network_member(spec: NetworkSpec) -> Problem:
    """The `Problem` of a network spec; its reference point is the worst of each objective
    over 512 Sobol points, less a tenth of its range."""
    names = [f"x{i}" for i in range(spec.dim)]
    space = Space({p: Float(0.0, 1.0) for p in names})

    def evaluate(config: Mapping[str, Any], rng: np.random.Generator | None) -> tuple[dict, dict]:
        return evaluate_network(spec, np.array([float(config[p]) for p in names]), rng)

    sink = spec.nodes[-1].name
    edges = [(names[i], n.name if n.name != sink else "o1") for n in spec.nodes for i in n.inputs]
    edges += [(p, n.name if n.name != sink else "o1") for n in spec.nodes for p in n.parents]
    edges += [(names[i], "g") for i in spec.read] + [("g", "o2")]
    metrics = tuple(n.name for n in spec.nodes if n.name != sink) + ("g",)
    X = space.sample_unit(512, 0).numpy()
    Y = np.array([[v["o1"], v["o2"]] for v, _ in (evaluate_network(spec, x, None) for x in X)])
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    ref = tuple(float(v) for v in lo - 0.1 * (hi - lo))
    return Problem(
        spec.name, space, {"o1": "maximize", "o2": "maximize"}, ref, evaluate, tuple(edges),
        metrics, noisy=spec.noise > 0,
    )  # fmt: skip
