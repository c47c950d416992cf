"""What users see: the learned DAG as a PNG and a plain-text account of the surrogate in use."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from structure.dag import Structure

__all__ = ["draw_structure", "explain"]

_TIER_COLOR = {"param": "#9ecae1", "metric": "#fdd0a2", "objective": "#a1d99b"}
_TIER_X = {"param": 0.0, "metric": 1.0, "objective": 2.0}


def draw_structure(
    structure: Structure | Mapping[str, Any],
    path: str | os.PathLike[str],
    note: str | None = None,
) -> Path:
    """Draw the DAG to a PNG: tiers as columns (parameters, metrics, objectives), edge width and
    label by strength (`Edge.strength`: share of the selection gain, or bootstrap frequency),
    dashed edges for required/repaired/direct ones, and a legend.

    Nodes without any edge are left out. Within-metric edges bend so they stay visible.

    Args:
        structure: A `Structure`, or its dict (`Structure.to_dict`, e.g. from `describe()`).
        path: Where to write the PNG (written atomically).
        note: A second title line, e.g. which surrogate is in use (`explain`'s first line).

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    if not isinstance(structure, Structure):
        structure = Structure.from_dict(structure)
    graph = structure.to_networkx()
    graph.remove_nodes_from([n for n in list(graph) if graph.degree(n) == 0])
    pos = _layout(structure, graph)
    height = max(3.0, 0.55 * max(_tier_counts(structure, graph).values(), default=1))
    fig, ax = plt.subplots(figsize=(12.0, height))
    for (s, t), data in graph.edges.items():
        learned = data["origin"] == "learned"
        same_tier = graph.nodes[s]["tier"] == graph.nodes[t]["tier"]
        nx.draw_networkx_edges(
            graph, pos, edgelist=[(s, t)], ax=ax, node_size=2200, arrowsize=10,
            width=0.6 + 3.0 * data["strength"], style="solid" if learned else "dashed",
            edge_color="#444" if learned else "#999", alpha=0.8,
            connectionstyle="arc3,rad=0.35" if same_tier else "arc3,rad=0.0",
        )  # fmt: skip
    labels = {e: f"{d['strength']:.2f}" for e, d in graph.edges.items() if d["origin"] == "learned"}
    nx.draw_networkx_edge_labels(
        graph, pos, edge_labels=labels, ax=ax, font_size=6, label_pos=0.6,
        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
    )  # fmt: skip
    for tier, color in _TIER_COLOR.items():  # names in boxes, drawn over the edges
        names = {n: n for n in graph if graph.nodes[n]["tier"] == tier}
        nx.draw_networkx_labels(
            graph, pos, labels=names, ax=ax, font_size=7,
            bbox={"boxstyle": "round,pad=0.35", "fc": color, "ec": "#555"},
        )  # fmt: skip
    title = (
        f"Learned structure ({structure.n_trials} trials): edge label = strength (share of the "
        "node's selection gain, or PC's bootstrap frequency)"
        if structure.n_trials
        else "Given structure (not learned: every edge required)"
    )
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=11)
    # Below the axes: inside, it covered the lowest node of the objective column.
    ax.legend(
        handles=_legend_handles(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5,
        fontsize=7, frameon=False,
    )  # fmt: skip
    ax.axis("off")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:  # a reader never sees half a PNG
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tiers = {"param": "parameter", "metric": "intermediate metric", "objective": "objective"}
    return [
        *(Patch(fc=_TIER_COLOR[t], ec="#555", label=label) for t, label in tiers.items()),
        Line2D([], [], color="#444", lw=2, label="learned edge (width = strength)"),
        Line2D([], [], color="#999", lw=1.5, ls="--", label="required, formula or direct edge"),
    ]


def _tier_counts(structure: Structure, graph: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in graph:
        counts[graph.nodes[n]["tier"]] = counts.get(graph.nodes[n]["tier"], 0) + 1
    return counts


def _layout(structure: Structure, graph: Any) -> dict[str, tuple[float, float]]:
    """Tiers as columns, each spread over the height of the tallest (so edges fan out); within
    the metric tier, topological order top to bottom."""
    order = {n: i for i, n in enumerate([*structure.params, *structure.topological_order()])}
    tallest = max(_tier_counts(structure, graph).values(), default=1)
    pos: dict[str, tuple[float, float]] = {}
    for tier in _TIER_X:
        names = sorted(
            (n for n in graph if graph.nodes[n]["tier"] == tier),
            key=lambda n: order.get(n, len(order)),
        )
        gap = min(2.0, (tallest - 1) / (len(names) - 1)) if len(names) > 1 else 1.0
        for i, name in enumerate(names):
            pos[name] = (_TIER_X[tier], -gap * (i - (len(names) - 1) / 2.0))
    return pos


def explain(description: Mapping[str, Any]) -> str:
    """Say which surrogate is in use and why, from a surrogate's `describe()` dict.

    Args:
        description: `StructuredSurrogate.describe()` (other surrogates' dicts are shown
            briefly).

    Returns:
        A few lines of plain text.
    """
    if not description:
        return "No surrogate has been fitted yet (the tuner is still in its initial design)."
    if description.get("surrogate") != "StructuredSurrogate":
        name = description.get("model", "unknown model")
        return f"Surrogate in use: {name} (flat; no structure is learned by this surrogate)."
    model = description.get("model", "flat")
    given = (description.get("structure") or {}).get("n_trials", 1) == 0
    network = f"GP network over the {'given' if given else 'learned'} structure"
    lines = [
        f"Surrogate in use: {network if model == 'network' else 'flat GP'}"
        f" (after {description.get('n_train', 0)} trials; structure from the first "
        f"{description.get('checkpoint', 0)}).",
        f"Why: {description.get('reason', 'n/a')}.",
    ]
    if model == "network" and description.get("proposer") == "flat":
        lines.append("Proposals: found by the flat GP's acquisition, chosen by the network's.")
    elif model == "network" and description.get("veto") is not None:
        lines.append(
            "Proposals: the network's, among points the flat GP's acquisition rates within "
            f"{description['veto']:g} nats of its best (the veto)."
        )
    scores = description.get("scores") or {}
    for kind in ("heldout", "prequential"):
        s = scores.get(kind)
        if s:
            lines.append(
                f"  {kind} log-likelihood over {s['n_points']} trials: network {s['network']:.2f}, "
                f"flat {s['flat']:.2f} (advantage {s['advantage']:+.2f} nats)"
            )
    if "advantage_per_point" in scores:
        lines.append(
            f"  together: {scores['advantage_per_point']:+.2f} nats per scored point (the network "
            f"is used unless it is below -{description.get('tolerance', 0.0)})"
        )
    learned = [e for e in description.get("edges", []) if e[3] in ("learned", "required")]
    if learned:
        lines.append(
            "Edges (strength): " + ", ".join(f"{s}->{t} ({w:.2f})" for s, t, w, _ in learned)
        )
    history = description.get("history") or []
    if history:
        used = sum(1 for h in history if h["model"] == "network")
        lines.append(f"Network used in {used} of {len(history)} fits so far.")
    return "\n".join(lines)
