from __future__ import annotations

import os
import stat
from pathlib import Path

from structure import Edge, Structure, draw_fit, draw_structure, explain
from structure.plot import structure_figure


def _structure() -> Structure:
    return Structure(
        ("a", "b"), ("t1", "t2"), ("speed",),
        (Edge("a", "t1", 0.9), Edge("t1", "t2", 0.7), Edge("b", "t2", 0.55),
         Edge("t2", "speed", 1.0), Edge("a", "speed", 0.0, "direct")),
        n_trials=20,
    )  # fmt: skip


def test_draw_structure_writes_a_png_from_a_structure_or_its_dict(tmp_path: Path) -> None:
    for i, arg in enumerate([_structure(), _structure().to_dict()]):
        out = draw_structure(arg, tmp_path / f"sub/dag{i}.png")
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["dag0.png", "dag1.png"]
    umask = os.umask(0)
    os.umask(umask)
    # a new file gets the mode any program's would (a temp file's 0o600 made it private)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_explain_covers_every_case() -> None:
    assert "initial design" in explain({})
    assert "flat" in explain({"model": "FlatSurrogate(SingleTaskGP)"})
    info = {
        "surrogate": "StructuredSurrogate", "model": "network", "reason": "it predicts better",
        "n_train": 30, "checkpoint": 30, "tolerance": 0.5,
        "scores": {
            "heldout": {"flat": -9.0, "network": -3.0, "n_points": 30, "advantage": 6.0},
            "advantage_per_point": 0.2,
        },
        "edges": [["t1", "t2", 0.7, "learned"], ["a", "speed", 0.0, "direct"]],
    }  # fmt: skip
    text = explain(info)
    assert "GP network" in text and "it predicts better" in text
    assert "t1->t2 (0.70)" in text and "a->speed" not in text
    assert "+0.20 nats per scored point" in text
    assert "over the learned structure" in text
    given = {**info, "structure": {"n_trials": 0}}  # `StudySettings(structure=...)`'s
    assert "GP network over the given structure" in explain(given)
    dense = explain({**info, "layout": "dense", "criterion": "rank"})
    assert "through every metric to the objectives (dense)" in dense
    assert "criterion 'rank' chooses" in dense and "lengthscales weigh its inputs" in dense
    shares = {f"m{i}": round(0.5**i, 3) for i in range(1, 9)}
    weighed = explain({**info, "layout": "dense", "relevance": {"speed": shares}})
    assert "  speed: m1 0.50, m2 0.25, m3 0.12, m4 0.06, m5 0.03, m6 0.02, and 2 more" in weighed


def _wide() -> Structure:
    """13 parameters, 10 metrics and 2 objectives, as the main job's family space with five
    workloads' metrics: many edges meet at each objective."""
    import random

    params = tuple(f"param_{i}" for i in range(13))
    metrics = tuple(f"{w}.{m}" for w in ("gpt2", "bert", "resnet", "t5", "vit")
                    for m in ("best.latency.ratio", "steps"))  # fmt: skip
    rnd, edges = random.Random(0), []
    for i, m in enumerate(metrics):
        edges += [Edge(p, m, round(rnd.uniform(0.01, 0.9), 2)) for p in rnd.sample(params, 3)]
        if i % 2:
            edges.append(Edge(metrics[i - 1], m, round(rnd.uniform(0.05, 0.5), 2)))
        edges += [Edge(m, o, round(rnd.uniform(0.01, 0.6), 2)) for o in ("anytime_hv", "final_hv")]
    edges += [Edge(p, o, 0.0, "direct") for p in params for o in ("anytime_hv", "final_hv")]
    return Structure(params, metrics, ("anytime_hv", "final_hv"), tuple(edges), n_trials=29)


def test_a_wide_structure_is_drawn_without_overlapping_labels() -> None:
    """Issue 52: the structure plot's edge labels overlapped (13 parameters, 10 metrics)."""
    import matplotlib.pyplot as plt

    from tests.plot_checks import overlapping_texts

    fig = structure_figure(_wide(), note="Surrogate in use: GP network over the learned structure.")
    try:
        assert overlapping_texts(fig) == []
        strengths = [t.get_text() for t in fig.axes[0].texts if t.get_text()[:2] == "0."]
        assert len(strengths) >= 40  # most of the 52 learned edges keep their label
    finally:
        plt.close(fig)


def test_a_dense_structure_is_titled_as_such() -> None:
    params, metrics = ("a", "b"), ("t1", "t2")
    edges = [Edge(p, m, 0.0, "direct") for p in params for m in metrics]
    edges += [Edge(m, "speed", 0.0, "direct") for m in metrics] + [Edge("b", "speed", 0.6)]
    dense = Structure(params, metrics, ("speed",), tuple(edges), n_trials=20)
    title = structure_figure(dense, layout="dense").axes[0].get_title()
    assert title.startswith("Dense structure (20 trials)")
    assert structure_figure(_structure()).axes[0].get_title().startswith("Learned structure")
    # With the fit's relevance each edge into the objective is labelled by its share.
    fig = structure_figure(
        dense, layout="dense", relevance={"speed": {"t1": 0.7, "t2": 0.2, "b": 0.1}}
    )
    assert "share of the objective GP's ARD relevance" in fig.axes[0].get_title()
    assert {t.get_text() for t in fig.axes[0].texts} >= {"0.70", "0.20", "0.10"}


def test_draw_fit_draws_a_fits_structure_with_its_layout_and_relevance(tmp_path: Path) -> None:
    info = {
        "surrogate": "StructuredSurrogate", "model": "network", "layout": "dense",
        "structure": _structure().to_dict(), "relevance": {"speed": {"t2": 0.9, "a": 0.1}},
    }  # fmt: skip
    assert draw_fit(info, tmp_path / "dag.png") == tmp_path / "dag.png"
    assert (tmp_path / "dag.png").read_bytes()[:4] == b"\x89PNG"
    assert draw_fit({**info, "structure": None}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
