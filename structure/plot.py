"""What users see: the learned DAG as a PNG and a plain-text account of the surrogate in use."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from structure.dag import Structure

__all__ = ["draw_fit", "draw_structure", "explain", "structure_figure"]

_TIER_COLOR = {"param": "#9ecae1", "metric": "#fdd0a2", "objective": "#a1d99b"}
_TIER_X = {"param": 0.0, "metric": 1.0, "objective": 2.0}
_TOP_INPUTS = 6  # inputs `explain` names per objective


def draw_structure(
    structure: Structure | Mapping[str, Any],
    path: str | os.PathLike[str],
    note: str | None = None,
    layout: str | None = None,
    relevance: Mapping[str, Mapping[str, float]] | None = None,
) -> Path:
    """Draw the DAG to a PNG: tiers as columns (parameters, metrics, objectives), edge width and
    label by strength (`Edge.strength`: share of the selection gain, or bootstrap frequency),
    dashed edges for required/repaired/direct ones, and a legend.

    Nodes without any edge are left out. Within-metric edges bend so they stay visible.

    Args:
        structure: A `Structure`, or its dict (`Structure.to_dict`, e.g. a fit's description's).
        path: Where to write the PNG (written atomically).
        note: A second title line, e.g. which surrogate is in use (`explain`'s first line).
        layout: The fit's ``layout`` (its description's): ``"dense"`` leaves the parameter ->
            metric mesh out and says so in the title.
        relevance: The fit's ``relevance`` (objective -> input -> share,
            `GPNetwork.relevance`); under the dense layout each edge into an objective is drawn
            with its share as width and label instead of a uniform dashed line.

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = structure_figure(structure, note, layout, relevance)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=120)
    finally:
        plt.close(fig)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:  # a reader never sees half a PNG
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def draw_fit(description: Mapping[str, Any], path: str | os.PathLike[str]) -> Path | None:
    """Draw a fit's structure (`tuner.Fitted.description` of a `StructuredSurrogate`) to a PNG
    as `draw_structure` does, titled with `explain`'s first line and drawn by the fit's
    ``layout`` and ``relevance``; None (nothing drawn) when the fit has no structure."""
    if not description.get("structure"):
        return None
    return draw_structure(
        description["structure"],
        path,
        note=explain(description).splitlines()[0],
        layout=description.get("layout"),
        relevance=description.get("relevance"),
    )


def structure_figure(
    structure: Structure | Mapping[str, Any],
    note: str | None = None,
    layout: str | None = None,
    relevance: Mapping[str, Mapping[str, float]] | None = None,
) -> Any:
    """The figure `draw_structure` saves. Edge labels sit along their edges where they overlap
    no node and no other label (`structure.labels`), strongest edges first; a label with no free
    spot is left out and the caption says how many were (every strength is in `explain`);
    ``layout`` and ``relevance`` as in `draw_structure`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    if not isinstance(structure, Structure):
        structure = Structure.from_dict(structure)
    graph = structure.to_networkx()
    graph.remove_nodes_from([n for n in list(graph) if graph.degree(n) == 0])
    dense = layout == "dense"
    if dense:  # the parameter -> metric mesh says nothing a sentence does not: not drawn
        mesh = [(p, m) for p in structure.params for m in structure.metrics]
        graph.remove_edges_from([e for e in mesh if graph.has_edge(*e)])
    shares = relevance if dense and relevance else {}
    weighed = bool(shares)
    for (s, t), data in graph.edges.items():  # an edge into an objective: its relevance share
        if s in shares.get(t, {}):
            data.update(strength=shares[t][s], origin="learned")
    pos = _layout(structure, graph)
    height = max(3.5, 0.7 * max(_tier_counts(structure, graph).values(), default=1))
    fig, ax = plt.subplots(figsize=(13.0, height + 1.6))
    for (s, t), data in graph.edges.items():
        learned = data["origin"] == "learned"
        nx.draw_networkx_edges(
            graph, pos, edgelist=[(s, t)], ax=ax, node_size=2200, arrowsize=10,
            width=0.6 + 3.0 * data["strength"] if learned else 0.7,
            style="solid" if learned else "dashed",
            edge_color="#444" if learned else "#bbb", alpha=0.8 if learned else 0.6,
            connectionstyle=f"arc3,rad={_bend(graph, s, t)}",
        )  # fmt: skip
    nodes = []
    for tier, color in _TIER_COLOR.items():  # names in boxes, drawn over the edges
        names = {n: n for n in graph if graph.nodes[n]["tier"] == tier}
        nodes += nx.draw_networkx_labels(
            graph, pos, labels=names, ax=ax, font_size=7,
            bbox={"boxstyle": "round,pad=0.35", "fc": color, "ec": "#555"},
        ).values()  # fmt: skip
    if not structure.n_trials:
        title = "Given structure (not learned: every edge required)"
    elif weighed:
        title = (
            f"Dense structure ({structure.n_trials} trials): every parameter feeds every metric "
            "(not drawn), every metric every objective;\nedge width and label = the input's "
            "share of the objective GP's ARD relevance (1/lengthscale)"
        )
    elif dense:
        title = (
            f"Dense structure ({structure.n_trials} trials): every parameter feeds every metric "
            "(not drawn), every metric every objective (dashed);\nsolid: a parameter an "
            "objective reads besides the metrics, label = its share of the selection gain"
        )
    else:
        title = (
            f"Learned structure ({structure.n_trials} trials): edge label = strength (share of "
            "the node's selection gain, or PC's bootstrap frequency)"
        )
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=11)
    ax.axis("off")
    # Below the axes: inside, it covered the lowest node of the objective column.
    ax.legend(
        handles=_legend_handles(weighed), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5,
        fontsize=7, frameon=False,
    )  # fmt: skip
    fig.tight_layout()
    left_out = _edge_labels(ax, graph, pos)
    if left_out:
        fig.text(
            0.5, 0.005, f"{left_out} weaker edges drawn without their label (no room); "
            "`tuner structure` prints every strength", ha="center", fontsize=7, color="0.4",
        )  # fmt: skip
    return fig


def _bend(graph: Any, s: str, t: str) -> float:
    """The arc of an edge: edges within a tier bend so they stay visible."""
    return 0.35 if graph.nodes[s]["tier"] == graph.nodes[t]["tier"] else 0.0


#: Where along an edge its label may sit (fraction from source to target), in order of taste.
_ALONG = (0.22, 0.3, 0.16, 0.38, 0.5, 0.62, 0.74, 0.26, 0.34, 0.44, 0.56, 0.68, 0.8, 0.19)


def _edge_labels(ax: Any, graph: Any, pos: Mapping[str, tuple[float, float]]) -> int:
    """Label the learned edges with their strengths where the label overlaps nothing (node
    boxes, legend, title, other labels); returns how many found no room."""
    import numpy as np

    from structure.labels import text_boxes

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    taken = text_boxes(fig)
    to_px, to_data = ax.transData.transform, ax.transData.inverted().transform
    learned = [(e, d) for e, d in graph.edges.items() if d["origin"] == "learned"]
    left_out = 0
    for (s, t), data in sorted(learned, key=lambda ed: -ed[1]["strength"]):
        a, b = to_px(pos[s]), to_px(pos[t])
        rad = _bend(graph, s, t)
        ctrl = (a + b) / 2 + rad * np.array([b[1] - a[1], a[0] - b[0]])  # arc3's control point
        for f in _ALONG:
            p = (1 - f) ** 2 * a + 2 * (1 - f) * f * ctrl + f**2 * b  # on the (bent) edge
            d = 2 * (1 - f) * (ctrl - a) + 2 * f * (b - ctrl)  # its direction there
            angle = float(np.degrees(np.arctan2(d[1], d[0])))
            x, y = to_data(p)
            label = ax.text(
                x, y, f"{data['strength']:.2f}", fontsize=6, ha="center", va="center",
                rotation=(angle + 90) % 180 - 90, rotation_mode="anchor", zorder=5,
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85},
            )  # fmt: skip
            box = label.get_window_extent(renderer).expanded(1.1, 1.15)
            if not any(box.overlaps(o) for o in taken):
                taken.append(box)
                break
            label.remove()
        else:
            left_out += 1
    return left_out


def _legend_handles(weighed: bool = False) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tiers = {"param": "parameter", "metric": "intermediate metric", "objective": "objective"}
    edge = "edge (width = relevance share)" if weighed else "learned edge (width = strength)"
    return [
        *(Patch(fc=_TIER_COLOR[t], ec="#555", label=label) for t, label in tiers.items()),
        Line2D([], [], color="#444", lw=2, label=edge),
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
        gap = min(4.0, (tallest - 1) / (len(names) - 1)) if len(names) > 1 else 1.0
        for i, name in enumerate(names):
            pos[name] = (_TIER_X[tier], -gap * (i - (len(names) - 1) / 2.0))
    return pos


def explain(description: Mapping[str, Any]) -> str:
    """Say which surrogate is in use and why, from the description of a fit.

    Args:
        description: `tuner.Fitted.description` of a `StructuredSurrogate`'s fit (other
            surrogates' descriptions are shown briefly); empty where nothing was fitted.

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
    layout = "given" if given else description.get("layout", "learned")
    network = (
        "GP network from the parameters through every metric to the objectives (dense)"
        if layout == "dense"
        else f"GP network over the {layout} structure"
    )
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
            f"  together: {scores['advantage_per_point']:+.2f} nats per scored point "
            + (
                "(criterion 'rank' chooses: see Why)"
                if description.get("criterion") == "rank"
                else f"(the network is used unless it is below -{description.get('tolerance', 0.0)})"
            )
        )
    learned = [e for e in description.get("edges", []) if e[3] in ("learned", "required")]
    if learned:
        lines.append(
            "Edges (how strongly the data supports each, 0-1): "
            + ", ".join(f"{s}->{t} ({w:.2f})" for s, t, w, _ in learned)
        )
    relevance = description.get("relevance") or {}
    if relevance:
        lines.append("What each objective's GP reads most (share of its ARD relevance):")
    for node, shares in relevance.items():
        top = list(shares.items())[:_TOP_INPUTS]
        rest = f", and {len(shares) - len(top)} more" if len(shares) > len(top) else ""
        lines.append(f"  {node}: " + ", ".join(f"{n} {w:.2f}" for n, w in top) + rest)
    if layout == "dense":
        lines.append(
            "Every parameter feeds every metric and every metric every objective; each node "
            "GP's lengthscales weigh its inputs. Learned edges: the parameters an objective "
            "reads besides the metrics."
        )
    return "\n".join(lines)
