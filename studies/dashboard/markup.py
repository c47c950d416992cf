"""Small HTML and Plotly builders for the dashboard's panels, the generic ones and those an
application adds through `studies.dashboard.Hooks` (every value escaped here).

Figures are plain JSON-able dicts in Plotly's figure format (``data`` + ``layout``), so drawing
them needs plotly.js in the page and no Python plotting library.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "age",
    "bars",
    "cards",
    "div",
    "esc",
    "figure",
    "fmt",
    "note",
    "state",
    "table",
    "trial_link",
]

#: Colors of the trial states (as in `studies.tables`).
STATE_COLOR = {
    "COMPLETE": "#2e7d32",
    "FAILED": "#c62828",
    "RUNNING": "#b26a00",
    "WAITING": "#0277bd",
}


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value: Any) -> str:
    """A number with 4 significant digits (``"-"`` for None), anything else as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def trial_link(number: int) -> str:
    """A link that opens trial ``number`` in the Trial view."""
    return f'<a href="#trial-{int(number)}" class="trial" data-trial="{int(number)}">#{int(number)}</a>'


def age(timestamp: float | None) -> str:
    """An element the page keeps updated with the time since ``timestamp`` (Unix seconds)."""
    if timestamp is None:
        return "-"
    return f'<span class="age" data-t="{float(timestamp):.3f}"></span>'


def state(value: Any) -> str:
    """A trial state, colored."""
    s = str(value)
    return f'<span class="state" style="color:{STATE_COLOR.get(s, "#333")}">{esc(s)}</span>'


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "",
    raw: bool = True,
    empty: str = "none",
) -> str:
    """An HTML table (no header row when every header is empty); cells are trusted HTML when
    ``raw`` (build them with `esc`), else escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = []
    for row in rows:
        cells = "".join(f"<td>{c if raw else esc(c)}</td>" for c in row)
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}" class="empty">{esc(empty)}</td></tr>')
    return f'<table class="{esc(cls)}">{thead}<tbody>{"".join(body)}</tbody></table>'


def cards(items: Iterable[tuple[str, str, str]]) -> str:
    """Summary cards ``(label, value HTML, test id)``."""
    out = []
    for label, value, key in items:
        out.append(
            f'<div class="card"><div class="label">{esc(label)}</div>'
            f'<div class="value" data-num="{esc(key)}">{value}</div></div>'
        )
    return f'<div class="cards">{"".join(out)}</div>'


def note(text: str, kind: str = "note") -> str:
    """A paragraph of explanation (``kind``: ``note``, ``warn`` or ``empty``)."""
    return f'<p class="{esc(kind)}">{esc(text)}</p>'


def figure(fig_id: str, data: list[dict[str, Any]], layout: dict[str, Any]) -> dict[str, Any]:
    """A Plotly figure dict drawn into the element ``fig_id`` (with the page's defaults)."""
    base = {
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "hovermode": "closest",
        "template": None,
        "font": {"size": 12},
        "paper_bgcolor": "white",
        "plot_bgcolor": "#fafafa",
    }
    merged = {**base, **layout}
    for axis in ("xaxis", "yaxis"):  # no heavy line at 0 across scatter plots
        merged[axis] = {"zeroline": False, **merged.get(axis, {})}
    return {"id": fig_id, "data": data, "layout": merged}


def div(fig_id: str, height: int = 380) -> str:
    """The element a figure is drawn into."""
    return f'<div class="fig" id="{esc(fig_id)}" style="height:{int(height)}px"></div>'


def bars(
    fig_id: str,
    weights: dict[str, float],
    top: int = 15,
    part: str = "part",
    quantity: str = "weight",
) -> tuple[dict[str, Any], int]:
    """Ranked horizontal bars of weights: the ``top`` largest, one bar for all the other parts,
    and a dashed line at the uniform weight (as `studies.plots.plot_weights` draws them), named
    in the application's words (`studies.weights.WeightsOf`). Returns the figure and the height
    it needs."""
    ranked = sorted(weights, key=lambda r: (-weights[r], r))
    shown = ranked[:top]
    labels = list(shown)
    values = [weights[r] for r in shown]
    colors = ["#2e7d32"] * len(shown)
    if len(ranked) > len(shown):
        rest = ranked[len(shown) :]
        labels.append(f"{len(rest)} other {part}s (sum)")
        values.append(sum(weights[r] for r in rest))
        colors.append("#9e9e9e")
    uniform = 1.0 / len(ranked) if ranked else 0.0
    height = 70 + 22 * len(labels)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": values[::-1],
            "y": labels[::-1],
            "marker": {"color": colors[::-1]},
            "hovertemplate": "%{y}: %{x:.4f}<extra></extra>",
        }
    ]
    layout = {
        "xaxis": {"title": {"text": quantity}},
        "margin": {"l": 190, "r": 20, "t": 24, "b": 45},
        "showlegend": False,
        "shapes": [
            {
                "type": "line",
                "x0": uniform,
                "x1": uniform,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dash", "width": 1, "color": "black"},
            }
        ],
        "annotations": [
            {
                "x": uniform,
                "y": 1.0,
                "yref": "paper",
                "text": f"uniform 1/{len(ranked)}",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10},
            }
        ],
    }
    return figure(fig_id, data, layout), height
