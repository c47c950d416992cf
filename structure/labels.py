"""Labels that never overlap: each is put at the first free spot around its anchor.

Matplotlib draws text where it is told, so labels of close points (a Pareto front's cluster,
edges meeting at one node) pile up. `place_labels` measures every label after a draw
(``Text.get_window_extent``) and tries offsets in rings of growing distance until the label's box
overlaps no box already taken (other labels, the legend, node boxes) and stays in the axes; a far
label gets a leader line, and one with no free spot is left out (the caller says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["place_labels", "text_boxes"]

#: Distances (points) of the rings of candidate offsets, nearest first.
RINGS = (5.0, 12.0, 20.0, 30.0, 42.0)
#: Candidate directions per ring (degrees, the first up-right).
DIRECTIONS = (45, 135, -45, -135, 90, -90, 0, 180, 20, 160, -20, -160, 70, 110, -70, -110)


def text_boxes(fig: Any, exclude: Sequence[Any] = ()) -> list[Any]:
    """Display-space boxes of the figure's visible, non-empty texts (after a draw)."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    out = []
    for t in fig.findobj(Text):
        if t in exclude or not t.get_visible() or not t.get_text().strip():
            continue
        out.append(t.get_window_extent(renderer))
    return out


def _alignment(angle: float) -> tuple[str, str]:
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
    va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
    return ha, va


def place_labels(
    ax: Any,
    anchors: Sequence[tuple[float, float, str]],
    occupied: Sequence[Any] = (),
    rings: Sequence[float] = RINGS,
    **text_kw: Any,
) -> list[Any]:
    """Annotate each ``(x, y, text)`` anchor (data coordinates) at the first free offset.

    Args:
        ax: The axes (its figure is drawn once here to measure text).
        anchors: The points and their labels, most important first (they choose first).
        occupied: Display-space boxes labels must not cover (a legend, node boxes, ticks).
        rings: Distances of the candidate offsets, in points.
        **text_kw: Passed to ``Axes.annotate`` (font size, bbox...).

    Returns:
        One annotation per anchor, or None for an anchor with no free spot.
    """
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    taken = list(occupied)
    out: list[Any] = []
    for x, y, label in anchors:
        placed = None
        for dist in rings:
            for angle in DIRECTIONS:
                dx = dist * math.cos(math.radians(angle))
                dy = dist * math.sin(math.radians(angle))
                ha, va = _alignment(angle)
                arrow = {"arrowstyle": "-", "color": "0.5", "lw": 0.5} if dist > 12 else None
                t = ax.annotate(
                    label, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                    arrowprops=arrow, annotation_clip=False, **text_kw,
                )  # fmt: skip
                box = t.get_window_extent(renderer).expanded(1.04, 1.08)
                fits = inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
                if fits and not any(box.overlaps(o) for o in taken):
                    placed = t
                    taken.append(box)
                    break
                t.remove()
            if placed is not None:
                break
        out.append(placed)
    return out
