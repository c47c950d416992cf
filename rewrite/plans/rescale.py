"""Rescaling a captured graph from the marker sizes it was traced at to a real batch and
sequence length (`rewrite.plans.layout.ModelLayout` captures each block once, at `B_MARK` x
`S_MARK`, and asks for any size here): every dimension equal to a marker, or to a product with
one, is substituted, and reshapes are regrouped so their targets stay consistent."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rewrite.builder import GraphBuilder
from rewrite.errors import PlanError, RewriteError
from rewrite.ir import Graph, Value

__all__ = ["B_MARK", "S_MARK", "rescale", "substitutions"]

#: Marker sizes the graphs are exported at (primes no real model dimension equals).
B_MARK = 5
S_MARK = 37


def substitutions(b: int, s: int | None) -> dict[int, int]:
    subs = {B_MARK: b}
    if s is not None:
        subs.update({S_MARK: s, B_MARK * S_MARK: b * s, S_MARK * S_MARK: s * s})
        subs[B_MARK * S_MARK * S_MARK] = b * s * s
    return subs


def _sub(value: Any, subs: Mapping[int, int]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value in subs:
            return subs[value]
        if value < 0 and -value in subs:
            return -subs[-value]
        return value
    if isinstance(value, tuple):
        return tuple(_sub(v, subs) for v in value)
    return value


def rescale(graph: Graph, subs: Mapping[int, int], name: str) -> Graph:
    """``graph`` re-built with every marker dimension replaced (see the module docstring)."""
    b = GraphBuilder(graph.name)
    env: dict[Value, Value] = {}
    for node in graph:
        if node.op in ("input", "param") or (
            node.op == "const" and _sub(node.type.shape, subs) != node.type.shape
        ):
            shape = _sub(node.type.shape, subs)
            if node.op == "param":
                new = b.param(node.attrs["name"], shape, node.type.dtype)
            else:
                label = node.attrs.get("name") or f"const:{node.id}"
                new = b.input(label, shape, node.type.dtype)
            env[node.out(0)] = new
            continue
        if node.op == "const":
            env[node.out(0)] = b.add_node("const", (), dict(node.attrs)).out(0)
            continue
        attrs = {k: _sub(v, subs) for k, v in node.attrs.items()}
        if node.op == "reshape":
            new_in = b.type_of(env[node.inputs[0]]).shape
            attrs["shape"] = _reshape_target(node.in_types[0].shape, node.type.shape, new_in, subs)
        try:
            new_node = b.add_node(node.op, [env[v] for v in node.inputs], attrs)
        except RewriteError as exc:
            raise PlanError(
                f"Cannot re-instantiate {name!r} at the plan's sizes: node {node!r} fails with "
                f"{exc}. The model computes a size from the batch or sequence length in a way "
                "the marker substitution does not see; export it at its real sizes instead."
            ) from exc
        for i, v in enumerate(node.outs):
            env[v] = new_node.out(i)
    return b.build([env[v] for v in graph.outputs])


def _groups(a: tuple[int, ...], c: tuple[int, ...]) -> list[tuple[range, range]]:
    """Split two shapes of one element count into runs of equal products (reshape groups)."""
    out, i, j = [], 0, 0
    while i < len(a) or j < len(c):
        i0, j0 = i, j
        pa = a[i] if i < len(a) else 1
        pc = c[j] if j < len(c) else 1
        i, j = i + 1, j + 1
        while pa != pc:
            if pa < pc:
                pa, i = pa * a[i], i + 1
            else:
                pc, j = pc * c[j], j + 1
        out.append((range(i0, min(i, len(a))), range(j0, min(j, len(c)))))
    return out


def _reshape_target(
    old_in: tuple[int, ...],
    old_out: tuple[int, ...],
    new_in: tuple[int, ...],
    subs: Mapping[int, int],
) -> tuple[int, ...]:
    """A reshape's target at new sizes: each group of dims keeps its new element count; inside
    a group of several output dims, the one holding a marker factor takes what is left."""
    target = list(old_out)
    for gi, go in _groups(old_in, old_out):
        total = math.prod(new_in[k] for k in gi)
        outs = list(go)
        if len(outs) == 1:
            target[outs[0]] = total
            continue
        fixed = [k for k in outs if old_out[k] % B_MARK and old_out[k] % S_MARK]
        free = [k for k in outs if k not in fixed]
        if len(free) == 1:
            target[free[0]] = total // max(1, math.prod(old_out[k] for k in fixed))
        else:  # no marker inside, or several: substitute (inference reports a mismatch)
            for k in free:
                target[k] = _sub(old_out[k], subs)
    return tuple(target)
