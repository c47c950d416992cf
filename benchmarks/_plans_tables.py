"""docs/plans.md's tables from ``benchmarks/results/bench_plans.json``.

``python -m benchmarks.bench_plans --docs`` rewrites the text between each
``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` marker pair of docs/plans.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "plans.md"


def _anchors(part: dict[str, Any]) -> list[str]:
    out = [
        "| row | published tokens/s/GPU | modeled | error | published GiB | modeled | error | |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in part["rows"]:
        r = dict(zip(part["columns"], row, strict=True))
        note = "fitted" if r["fitted"] else ("" if r["modelled"] else "CP > 1: outside the bar")
        te, ge = r["tps_model"] / r["tps"] - 1, r["gib_model"] / r["gib"] - 1
        out.append(f"| {r['row']} | {r['tps']:,} | {r['tps_model']:,.0f} | {te:+.1%} | "
                   f"{r['gib']:.1f} | {r['gib_model']:.1f} | {ge:+.1%} | {note} |")  # fmt: skip
    return out


def _configs(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| model | GPUs | batch | best expert under 80 GiB (tokens/s/GPU) | search (peak) | "
        "search / expert | steps / seconds | the search's plan |",
        "|---|---:|---:|---|---|---:|---|---|",
    ]
    for c in rows:
        best = f"{c['best_expert']} {c['best_tps']:,.0f}" if c["best_expert"] else "none fits"
        found = (
            f"{c['search_tps']:,.0f} ({c['search_gib']:.1f} GiB)"
            if c["search_tps"]
            else "none fits"
        )
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.3f}"
        if c["ratio"] is not None and c["ratio"] >= 1.10:
            ratio = f"**{ratio}**"
        out.append(f"| {c['model']} | {c['gpus']} | {c['batch']} | {best} | {found} | {ratio} | "
                   f"{c['steps']} / {c['seconds']:.1f} s | {c['plan'] or ''} |")  # fmt: skip
    return out


def _autoparallel(part: dict[str, Any]) -> list[str]:
    out = [
        "| mesh | layers | AutoParallel trace+build / solve | its plan | as costed here "
        "(tokens/s/GPU, GiB) | search (tokens/s/GPU, GiB) | search seconds |",
        "|---|---:|---|---|---|---|---:|",
    ]
    for r in part["runs"]:
        mesh = "x".join(str(m) for m in r["mesh"])
        wq = r.get("wq_placement") or r.get("placements", {}).get("layers.*.attention.wq.weight")
        plan = f"every weight {wq[0]} ({r['as_expert']})" if r["as_expert"] else f"wq {wq}"
        ap = (f"{r['autoparallel_tps']:,.0f}, {r['autoparallel_gib']:.1f}"
              if r["autoparallel_tps"] else "-")  # fmt: skip
        out.append(f"| {mesh} | {r['layers']} | {r['trace_build_s']:.0f} s / {r['solve_s']:.1f} s | "
                   f"{plan} | {ap} | {r['search_tps']:,.0f}, {r['search_gib']:.1f} | "
                   f"{r['search_s']:.1f} |")  # fmt: skip
    return out


def update_docs(payload: dict[str, Any], doc: Path = DOC) -> list[str]:
    """Rewrite ``doc``'s marked tables from ``payload``; return the names rewritten."""
    tables = {}
    if "anchors" in payload:
        tables["anchors"] = _anchors(payload["anchors"])
    if "configs" in payload:
        tables["configs"] = _configs(payload["configs"])
    if "autoparallel" in payload:
        tables["autoparallel"] = _autoparallel(payload["autoparallel"])
    text = doc.read_text()
    for name, lines in tables.items():
        pattern = re.compile(rf"(<!-- table:{name} -->\n).*?(<!-- /table:{name} -->)", re.S)
        text = pattern.sub(lambda m, ls=lines: m.group(1) + "\n".join(ls) + "\n" + m.group(2), text)
    doc.write_text(text)
    return sorted(tables)
