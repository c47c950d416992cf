"""`bench_families report`: the saved rows merged into one small results file, and the tables.

Structure rows are paired with the flat GP's row of the same member and seed; warm rows with the
cold study's of the same target and seed. A member's figure is the median over seeds of the
paired difference with a 95% percentile-bootstrap interval (`rewrite.stats.interval`) and the
Wilcoxon signed-rank p; "behind beyond noise" is an interval wholly below zero. Differences are
also given relative to the flat GP's (the cold study's) median hypervolume of the member at that
trial, so that members of different scales pool: a family's figure is the median over its
members, and its pooled test the Wilcoxon test of every (member, seed) relative difference.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks._common import (
    RESULTS_DIR,
    compact_json,
    machine_info,
    paired_test,
    round_floats,
    write_results,
)
from benchmarks._families import SPLIT
from benchmarks.bench_families import AT, ROWS, _seeds, seed_ranges

FAMILIES = {"structure": ("search", "network", "rewrite"), "warm": ("warm",)}
_LEARNED = "auto+learn.dense=false+learn.direct_edges=true"  # `auto` until the dense layout
DROPPED = (
    f"{_LEARNED}+criterion=likelihood",
    f"{_LEARNED}+criterion=likelihood+calibrate=true",
    f"{_LEARNED}+criterion=likelihood+log_objectives=true",
    f"{_LEARNED}+criterion=likelihood+objective_tolerance=0",
    f"{_LEARNED}+criterion=rank",
    "auto+learn.dense=true+learn.direct_edges=true+criterion=rank",
    "auto+learn.dense=true+learn.direct_edges=false+learn.select=none+criterion=likelihood",
    "auto+learn.dense=true+learn.direct_edges=false+learn.select=none+criterion=rank",
    "stated+calibrate=true+criterion=likelihood",
    "stated+veto=none+criterion=likelihood",
    "warm+warm_start_gate=-1.64",
    "warm+warm_start_model=rgpe",
    "warm+warm_start_queue=1",
    "warm+warm_start_queue=1+warm_start_suggest=2",
    "warm+warm_start_queue=2+warm_start_suggest=0+warm_start_rank=0",
)
"""Rejected candidates and superseded defaults kept out of the results file (rows and carried
figures alike), for its size: their figures are quoted in docs/families.md where they were
decided (the last: `auto`'s learned structure chosen by likelihood, the default until the dense
layout chosen by rank; the arms that ran before it are named by the settings they ran with)."""
RELATED = ("identical", "shifted", "moved")


def load_rows(kind: str) -> list[dict[str, Any]]:
    """Every saved row of ``kind`` (``structure`` or ``warm``)."""
    return [json.loads(p.read_text()) for p in sorted((ROWS / kind).glob("**/*.json"))]


def _split_of(name: str, kind: str) -> tuple[str, str] | None:
    for family in FAMILIES[kind]:
        for split, names in SPLIT[family].items():
            if name in names:
                return family, split
    return None


def _interval(diffs: Sequence[float]) -> list[float]:
    from rewrite.stats import interval

    iv = interval(diffs, np.median)
    return [iv.value, iv.low, iv.high]


def _paired(rows: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]], t: int) -> dict:
    """Paired figures at trial ``t`` of an arm's rows against the baseline's, by seed."""
    seeds = sorted(s for s in rows if s in base and len(rows[s]["hv"]) >= t)
    mine = [rows[s]["hv"][t - 1] for s in seeds]
    theirs = [base[s]["hv"][t - 1] for s in seeds]
    if not seeds:
        return {}
    diff, p = paired_test(mine, theirs)
    scale = float(np.median(theirs)) or 1.0
    rel = [(a - b) / abs(scale) for a, b in zip(mine, theirs, strict=True)]
    return {
        "seeds": seeds,
        "median": float(np.median(mine)),
        "base_median": float(np.median(theirs)),
        "diff": _interval([a - b for a, b in zip(mine, theirs, strict=True)]),
        "p": p,
        "rel": rel,
        "ahead": sum(a > b + 1e-12 for a, b in zip(mine, theirs, strict=True)),
        "behind": sum(a < b - 1e-12 for a, b in zip(mine, theirs, strict=True)),
    }


def structure_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split, family, member and arm: paired figures against flat at each of `AT`."""
    by: dict[str, dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by[r["member"]][r["arm"]][r["seed"]] = r
    out: dict[str, Any] = {}
    for name, arms in sorted(by.items()):
        where = _split_of(name, "structure")
        if where is None or "flat" not in arms:
            continue
        family, split = where
        cell = out.setdefault(split, {}).setdefault(family, {}).setdefault(name, {})
        for arm, seeds in arms.items():
            if arm == "flat":
                continue
            cell[arm] = {str(t): _paired(seeds, arms["flat"], t) for t in AT["structure"]}
            cell[arm]["cpu_ratio"] = float(
                np.median(
                    [
                        seeds[s]["cpu_s"] / arms["flat"][s]["cpu_s"]
                        for s in seeds
                        if s in arms["flat"]
                    ]
                )
            )
            cell[arm]["network_share"] = float(np.mean([seeds[s]["network_share"] for s in seeds]))
    return out


def _pooled(members: dict[str, Any], arm: str, t: int) -> dict[str, Any]:
    """A family's figure at trial ``t``: median of member medians (relative), pooled test."""
    cells = [m[arm][str(t)] for m in members.values() if arm in m and m[arm].get(str(t))]
    if not cells:
        return {}
    rel = [v for c in cells for v in c["rel"]]
    from scipy.stats import wilcoxon

    p = float(wilcoxon(rel).pvalue) if any(abs(v) > 1e-12 for v in rel) else 1.0
    return {
        "members": len(cells),
        "pairs": len(rel),
        "median_rel": float(np.median([np.median(c["rel"]) for c in cells])),
        "pooled_median_rel": float(np.median(rel)),
        "pooled_interval": _interval(rel),
        "pooled_p": p,  # the members beyond noise: `beyond_noise`, once carried ones are in
    }


MIN_SEEDS = 5
"""Fewest paired seeds whose interval can put a member beyond noise: a percentile bootstrap of
one seed is that seed's difference, of two their range (and the Wilcoxon test's smallest p on
four pairs is 0.125)."""


def beyond_noise(members: dict[str, Any], arm: str, t: int) -> dict[str, list[str]]:
    """The members whose paired 95% interval at trial ``t`` lies wholly below (above) zero,
    among those with at least `MIN_SEEDS` seeds; the others are listed as ``few_seeds``."""
    out: dict[str, list[str]] = {"behind_beyond_noise": [], "ahead_beyond_noise": [],
                                 "few_seeds": []}  # fmt: skip
    for name, m in members.items():
        cell = m.get(arm, {}).get(str(t))
        if not cell:
            continue
        if _n_seeds(cell) < MIN_SEEDS:
            out["few_seeds"].append(name)
        elif cell["diff"][2] < 0:
            out["behind_beyond_noise"].append(name)
        elif cell["diff"][1] > 0:
            out["ahead_beyond_noise"].append(name)
    return out


def warm_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split and pair: each warm arm against the cold study of its target, by seed."""
    cold: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    warm: dict[str, dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        target = r["member"].rsplit("/", 1)[0]
        if r["arm"] == "cold":
            cold[target][r["seed"]] = r
        else:
            warm[r["member"]][r["arm"]][r["seed"]] = r
    out: dict[str, Any] = {}
    for pair, arms in sorted(warm.items()):
        where = _split_of(pair, "warm")
        target = pair.rsplit("/", 1)[0]
        if where is None or target not in cold:
            continue
        cell = out.setdefault(where[1], {}).setdefault(pair, {})
        for arm, seeds in arms.items():
            figures: dict[str, Any] = {str(t): _paired(seeds, cold[target], t) for t in AT["warm"]}
            both = sorted(s for s in seeds if s in cold[target])
            w5 = [seeds[s]["hv"][4] for s in both]
            c10 = [cold[target][s]["hv"][9] for s in both]
            figures["warm5_vs_cold10"] = {
                "warm5": float(np.median(w5)) if w5 else None,
                "cold10": float(np.median(c10)) if c10 else None,
                "reaches": bool(w5) and float(np.median(w5)) >= float(np.median(c10)) - 1e-12,
            }
            figures["gate"] = [seeds[s].get("last_fit", {}).get("related") for s in both][:3]
            cell[arm] = figures
    return out


def load_main() -> list[dict[str, Any]]:
    """The main job's runs against Ax (`bench_peers` results files saved under
    ``ROWS/main/``), one per optimizer seed; a seed run twice keeps its first file's run."""
    runs: dict[int, dict[str, Any]] = {}
    for path in sorted((ROWS / "main").glob("*.json")):
        for run in json.loads(path.read_text())["runs"]:
            runs.setdefault(int(run["seed"]), run)
    return [runs[s] for s in sorted(runs)]


def main_summary(runs: list[dict[str, Any]], arm: str = "project", peer: str = "ax") -> dict:
    """Per trial count of `bench_peers.AT`: both arms' best ``anytime_hv`` per seed, medians,
    the paired difference (median, 95% bootstrap interval, Wilcoxon p), and on how many seeds
    each arm reaches the best value any arm reaches by then."""
    runs = [r for r in runs if arm in r["arms"] and peer in r["arms"]]
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "arms": [arm, peer]}
    if not runs:
        return out
    for t in (10, 20, 30):
        best = {a: [float(r["arms"][a]["best_at"][str(t)]) for r in runs] for a in (arm, peer)}
        top = [max(float(r["arms"][a]["best_at"][str(t)]) for a in r["arms"]) for r in runs]
        diff = [a - b for a, b in zip(best[arm], best[peer], strict=True)]
        out[str(t)] = {
            **{a: v for a, v in best.items()},
            "median": {a: float(np.median(v)) for a, v in best.items()},
            "diff": _interval(diff),
            "p": paired_test(best[arm], best[peer])[1],
            "reaches_best": {
                a: sum(v >= m - 1e-9 for v, m in zip(best[a], top, strict=True)) for a in best
            },
        }
    return out


def report() -> None:
    """Merge the rows into ``benchmarks/results/bench_families.json`` and print the tables.

    A member and arm (a family's pool, the main job) with no rows here keeps its figures from
    the results file, marked ``carried`` (`carry`): a checkout without some rows never drops
    what they measured."""
    structure = structure_summary([r for r in load_rows("structure") if r["arm"] not in DROPPED])
    warm = warm_summary([r for r in load_rows("warm") if r["arm"] not in DROPPED])
    families: dict[str, Any] = {}
    for split, fams in structure.items():
        for family, members in fams.items():
            arms = {a for m in members.values() for a in m}
            families.setdefault(split, {})[family] = {
                arm: {str(t): _pooled(members, arm, t) for t in AT["structure"]}
                for arm in sorted(arms)
            }
    compact = {
        "rule": (
            "defaults chosen on the design split only; the test split (benchmarks/_families.py "
            "SPLIT, committed before any run) is run after the defaults are committed"
        ),
        "split": {k: {s: list(v) for s, v in d.items()} for k, d in SPLIT.items()},
        "structure": _strip(structure),
        "families": families,
        "warm": _strip(warm),
        "main": main_summary(load_main()),
    }
    path = RESULTS_DIR / "bench_families.json"
    if path.exists():
        old = json.loads(path.read_text())
        compact = carry(compact, old)
        if "looks" in old:  # written by `bench_families looks`, not from rows
            compact["looks"] = old["looks"]
    for split, fams in compact["families"].items():  # carried pools too, from member cells
        for family, arms in fams.items():
            members = compact["structure"].get(split, {}).get(family, {})
            for arm, at in arms.items():
                for t, pool in at.items():
                    if t != "carried" and pool:
                        pool.update(beyond_noise(members, arm, int(t)))
    write_results(
        "bench_families", round_floats(compact, 5), machine=machine_info(), dumps=compact_json
    )
    print_tables(compact["structure"], compact["families"], compact["warm"])
    print_main(compact["main"])


def carry(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """``new`` with what only ``old`` (the results file as last written) holds: each member's
    arm with no rows now, and the pools of every family and arm that lost one of them, marked
    ``"carried": <the commit old was written at>`` (kept through later reports); never the
    arms of `DROPPED`."""
    out = json.loads(json.dumps(new))
    stamp = old.get("machine", {}).get("commit", "unknown")[:7]
    lost: set[tuple[str, str, str]] = set()  # (split, family, arm) with a member carried
    for kind in ("structure", "warm"):
        for split, groups in old.get(kind, {}).items():
            # structure: split -> family -> member -> arm; warm: split -> pair -> arm
            layers = groups.items() if kind == "structure" else [("warm", groups)]
            for family, members in layers:
                mine = out[kind].setdefault(split, {})
                if kind == "structure":
                    mine = mine.setdefault(family, {})
                for name, arms in members.items():
                    for arm, fig in arms.items():
                        if arm not in mine.get(name, {}) and arm not in DROPPED:
                            mine.setdefault(name, {})[arm] = {"carried": stamp, **fig}
                            lost.add((split, family, arm))
    for split, fams in old.get("families", {}).items():
        for family, arms in fams.items():
            mine = out["families"].setdefault(split, {}).setdefault(family, {})
            for arm, at in arms.items():
                if arm in DROPPED:
                    continue
                if arm not in mine or (split, family, arm) in lost:
                    mine[arm] = {"carried": at.get("carried", stamp), **at}
    if not out["main"].get("seeds") and old.get("main", {}).get("seeds"):
        out["main"] = {"carried": old["main"].get("carried", stamp), **old["main"]}
    return out


def _strip(tree: Any) -> Any:
    """The summary without the per-seed relative differences (kept: seeds, as ``"0-3,5"``, as
    ``--seeds`` takes them; medians; intervals)."""
    if isinstance(tree, dict):
        return {
            k: seed_ranges(v) if k == "seeds" else _strip(v) for k, v in tree.items() if k != "rel"
        }
    return tree


def print_tables(structure: dict, families: dict, warm: dict) -> None:
    for split in ("design", "test"):
        for family, members in structure.get(split, {}).items():
            print(f"\n{split} / {family}: paired HV difference to flat, median over seeds [95%], p")
            for name, arms in members.items():
                for arm, fig in arms.items():
                    cols = []
                    for t in AT["structure"]:
                        c = fig.get(str(t)) or {}
                        if c:
                            d = c["diff"]
                            cols.append(
                                f"@{t} {d[0]:+.3g} [{d[1]:+.3g}, {d[2]:+.3g}] p{c['p']:.2f}"
                            )
                    n = _n_seeds(fig.get("40") or fig.get("20") or {})
                    print(
                        f"  {name:22s} {arm:22s} n={n:2d} "
                        + "; ".join(cols)
                        + f"; cpu x{fig['cpu_ratio']:.1f} net {fig['network_share']:.0%}"
                        + _carried(fig)
                    )
            for arm, at in families.get(split, {}).get(family, {}).items():
                parts = [
                    f"@{t} {v['median_rel']:+.3f} (pooled {v['pooled_median_rel']:+.3f} "
                    f"[{v['pooled_interval'][1]:+.3f}, {v['pooled_interval'][2]:+.3f}], "
                    f"p {v['pooled_p']:.3f}, "
                    f"behind {len(v['behind_beyond_noise'])})"
                    for t, v in at.items()
                    if t != "carried" and v
                ]
                print(f"  FAMILY {arm:22s} relative: " + "; ".join(parts) + _carried(at))
    for split in ("design", "test"):
        if split not in warm:
            continue
        print(f"\nwarm {split}: warm - cold, median over seeds [95%]; warm@5 vs cold@10 (medians)")
        for pair, arms in warm[split].items():
            for arm, fig in arms.items():
                cols = []
                for t in AT["warm"]:
                    c = fig.get(str(t)) or {}
                    if c:
                        d = c["diff"]
                        cols.append(f"@{t} {d[0]:+.3g} [{d[1]:+.3g}, {d[2]:+.3g}]")
                r = fig["warm5_vs_cold10"]
                n = _n_seeds(fig.get("10") or {})
                print(
                    f"  {pair:24s} {arm:22s} n={n:2d} "
                    + "; ".join(cols)
                    + f"; w5 {r['warm5']:.4g} c10 {r['cold10']:.4g} {'reaches' if r['reaches'] else 'short'}"
                    + _carried(fig)
                )


def _n_seeds(cell: dict[str, Any]) -> int:
    """A cell's seed count, its seeds a list or, once stripped, a ``"0-3,5"`` range."""
    seeds = cell.get("seeds", "")
    return len(_seeds(seeds) if isinstance(seeds, str) else seeds) if seeds else 0


def _carried(fig: dict[str, Any]) -> str:
    return f" (carried from {fig['carried'][:7]})" if "carried" in fig else ""


def print_main(main: dict[str, Any]) -> None:
    if len(main.get("seeds", [])) == 0:
        return
    arm, peer = main["arms"]
    print(
        f"\nmain job, tuner seeds {main['seeds']}: best anytime_hv by trial t, median over "
        f"seeds{_carried(main)}"
    )
    for t in ("10", "20", "30"):
        c = main[t]
        d = c["diff"]
        print(
            f"  @{t} {arm} {c['median'][arm]:.4f} {peer} {c['median'][peer]:.4f} "
            f"diff {d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}] p {c['p']:.2f}; reaches the best: "
            f"{arm} {c['reaches_best'][arm]}, {peer} {c['reaches_best'][peer]} of {len(c[arm])}"
        )
