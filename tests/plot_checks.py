"""The check every plot test runs (issue 52): no two texts a figure draws overlap."""

from __future__ import annotations


def overlapping_texts(fig: object) -> list[tuple[str, str]]:
    """Pairs of the texts ``fig`` draws whose boxes overlap after a draw (tick labels included:
    those of the ticks inside their axis's view, the ones matplotlib draws)."""
    from matplotlib.text import Text

    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ticks, drawn = set(), []
    for ax in fig.axes:  # type: ignore[attr-defined]
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks |= {tick.label1, tick.label2}
                inside = lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo)
                if inside and ax.get_visible() and axis.get_visible():
                    drawn += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    drawn += [t for t in fig.findobj(Text) if t not in ticks and t.get_visible()]  # type: ignore[attr-defined]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]
    return [
        (a, b)
        for i, (a, ba) in enumerate(boxes)
        for b, bb in boxes[i + 1 :]
        if ba.overlaps(bb) and ba.intersection(ba, bb).width * ba.intersection(ba, bb).height > 1
    ]
