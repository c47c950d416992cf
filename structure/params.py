"""Parameter nodes: which unit-cube columns of a `spaces.Space` each parameter node reads.

A structure's parameter nodes are the space's parameters, except that a `Simplex` is split
into one node per part, named like its column (``"priors.fuse"``): a search's per-rule
counters are driven by their own rule's weight (``rule.fuse.applied`` by ``priors.fuse``), and
a node for the whole block would give every such counter all the weights as inputs. Knowledge
and fixed structures may still name a whole `Simplex` (``"priors"``): its edges stand for
edges from every part (`expand_knowledge`, `node_columns`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from structure.dag import Knowledge
from structure.errors import StructureError

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["expand_knowledge", "name_hints", "node_columns", "param_nodes"]

_PART_COUNTER = re.compile(r"^[^.]+\.([^.]+)\.")
"""A per-part counter ``<prefix>.<part>.<counter>``: its middle segment may name a Simplex part."""


def param_nodes(space: Space) -> dict[str, list[int]]:
    """Parameter node -> its columns, in column order (a `Fixed` parameter has none, so no
    node; a `Simplex` gives one node per part)."""
    names = space.columns
    simplex = space.simplex_dims
    out: dict[str, list[int]] = {}
    for name in space.names:
        columns = space.columns_of(name)
        if name in simplex:
            out.update({names[c]: [c] for c in columns})
        elif columns:
            out[name] = columns
    return out


def node_columns(space: Space, name: str) -> list[int]:
    """The columns a parameter node named `name` reads: a parameter's (all of a `Simplex`'s
    for its name) or one column's (`Space.columns`, e.g. ``"priors.fuse"``).

    Raises:
        StructureError: `name` is neither a parameter nor a column of the space.
    """
    if name in space.names:
        return space.columns_of(name)
    columns = space.columns
    if name in columns:
        return [columns.index(name)]
    raise StructureError(
        f"{name!r} is neither a parameter nor a column of the space; parameters "
        f"{space.names}, columns {columns}."
    )


def expand_knowledge(knowledge: Knowledge, space: Space) -> Knowledge:
    """`knowledge` with each edge from a whole `Simplex` replaced by edges from its parts."""
    names = space.columns
    parts = {s: [names[c] for c in cols] for s, cols in space.simplex_dims.items()}
    if not parts:
        return knowledge

    def expand(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        out = [(p, t) for s, t in pairs for p in parts.get(s, [s])]
        return tuple(dict.fromkeys(out))

    return Knowledge(
        required=expand(knowledge.required),
        forbidden=expand(knowledge.forbidden),
        formulas=knowledge.formulas,
        phase_order=knowledge.phase_order,
        candidates=expand(knowledge.candidates),
    )


def name_hints(space: Space, metrics: Iterable[str]) -> dict[str, list[str]]:
    """Metric -> the parameter nodes its name points to: for a per-part counter
    ``<prefix>.<part>.<counter>`` (e.g. ``rule.fuse.fired``), the nodes of the `Simplex` parts
    named ``<part>``. Soft knowledge: structure learning tries them first and keeps them unless the
    data says otherwise."""
    part_nodes: dict[str, list[str]] = {}
    for name, parameter in space.params.items():
        for part in getattr(parameter, "names", ()) if name in space.simplex_dims else ():
            part_nodes.setdefault(part, []).append(f"{name}.{part}")
    out: dict[str, list[str]] = {}
    for metric in metrics:
        match = _PART_COUNTER.match(metric)
        if match is not None and match.group(1) in part_nodes:
            out[metric] = part_nodes[match.group(1)]
    return out
