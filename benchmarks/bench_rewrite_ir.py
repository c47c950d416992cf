"""Benchmark of the rewrite IR: zoo import, full and incremental cost evaluation.

Measures, on one core (torch and BLAS limited to one thread):

* import time (config build + torch.export + conversion) and node count of every zoo model at
  both sizes;
* full cost evaluations per second on the 12-layer GPT-2 (``gpt2-full``): a fresh `Graph` object
  each time (topological order and liveness recomputed) with the per-node cost cache warm, and
  fully cold (every node cache cleared);
* graph edits per second (a one-node rewrite: ``tanh`` -> ``sigmoid``), structural hashes of
  such children per second (inheriting the parent's node hashes), and incremental re-costs per
  second of such edits from the parent's cost.

Prints a table and writes ``benchmarks/results/bench_rewrite_ir.json`` with the machine,
versions and seeds. Targets: full GPT-2 import < 10 s; >= 200 full evaluations/s; incremental
>= 20x the full rate.

Usage: ``python -m benchmarks.bench_rewrite_ir [--quick]`` (``--quick`` skips the full-size
LLaMA, whose export alone takes ~30 s).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import rewrite
from benchmarks._common import write_results
from rewrite import Graph, GraphEditor, cost, zoo

SEED = 0
DEVICE = "h100"
_costmod = sys.modules["rewrite.costmodel"]


def _rate(fn: Callable[[], int], repeats: int = 5) -> float:
    """Best-of-``repeats`` rate (operations per second) of ``fn``, which returns its op count."""
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t))
    return best


def bench_imports(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for name in zoo.names():
        for size in zoo.SIZES:
            if quick and (name, size) == ("llama", "full"):
                continue
            t0 = time.perf_counter()
            zm = zoo.model(name, size=size, seed=SEED)
            t1 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = zm.to_graph()
            t2 = time.perf_counter()
            rows.append(
                {
                    "model": f"{name}-{size}",
                    "nodes": len(g),
                    "opaque": g.op_counts().get("opaque", 0),
                    "params": sum(n.type.numel for n in g.params()),
                    "build_s": t1 - t0,
                    "import_s": t2 - t1,
                    "total_s": t2 - t0,
                }
            )
            print(f"  {name}-{size}: {len(g)} nodes in {t2 - t0:.2f} s", flush=True)
    return rows


def _clear_node_caches(g: Graph) -> None:
    for n in g.nodes.values():
        n._cost = None
    _costmod.clear_caches()


def bench_cost(g: Graph, n_full: int = 200, n_edit: int = 2000) -> dict[str, Any]:
    base = cost(g, DEVICE)

    def full_warm() -> int:
        for _ in range(n_full):
            cost(g.copy(), DEVICE)
        return n_full

    def full_cold() -> int:
        for _ in range(n_full // 4):
            _clear_node_caches(g)
            cost(g.copy(), DEVICE)
        return n_full // 4

    rng = np.random.default_rng(SEED)
    tanh_ids = g.by_op("tanh")
    sites = [tanh_ids[k] for k in rng.integers(0, len(tanh_ids), n_edit)]

    def one_edit(nid: int) -> Graph:
        node = g.node(nid)
        ed = GraphEditor(g)
        ed.replace(node.out(), ed.sigmoid(node.inputs[0]))
        return ed.finish()

    children: list[Graph] = []

    def edits() -> int:
        children[:] = [one_edit(nid) for nid in sites]
        return n_edit

    def incremental() -> int:
        for child in children:
            cost(child, DEVICE, base=base)
        return n_edit

    def incremental_with_peak() -> int:
        for child in children[:n_full]:
            c = cost(child.copy(), DEVICE)  # fresh object: no cached order or liveness
            c2 = cost(child, DEVICE, base=base)
            assert abs(c2.latency - c.latency) <= 1e-9 * c.latency
        return min(n_full, n_edit)

    def child_hashes() -> int:
        for child in children[:n_full]:
            child._hashes = child._digest = None  # as if fresh from the editor
            child._hash_src = (
                g,
                frozenset(n.id for n in (*child.delta.removed, *child.delta.added)),
            )
            _ = child.hash
        return min(n_full, n_edit)

    _ = g.hash  # parent hashes exist, as in a search
    out = {
        "nodes": len(g),
        "full_evals_per_s": _rate(full_warm),
        "full_evals_cold_per_s": _rate(full_cold, 3),
        "edits_per_s": _rate(edits, 3),
        "incremental_per_s": _rate(incremental),
        "child_hashes_per_s": _rate(child_hashes, 3),
        "checked_incremental_vs_full": _rate(incremental_with_peak, 1),
    }
    out["incremental_speedup"] = out["incremental_per_s"] / out["full_evals_per_s"]
    out["cost_h100"] = base.as_dict()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the full-size LLaMA import")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    print(f"rewrite IR benchmark ({len(rewrite.ops.op_names())} ops), one thread")
    imports = bench_imports(args.quick)
    g = zoo.build("gpt2", size="full", seed=SEED)
    costs = bench_cost(g)
    print()
    print(
        f"{'model':<14}{'nodes':>7}{'opaque':>8}{'params':>15}{'build s':>9}{'import s':>10}{'total s':>9}"
    )
    for r in imports:
        print(
            f"{r['model']:<14}{r['nodes']:>7}{r['opaque']:>8}{r['params']:>15,}{r['build_s']:>9.2f}"
            f"{r['import_s']:>10.2f}{r['total_s']:>9.2f}"
        )
    print()
    print(f"cost model on gpt2-full ({costs['nodes']} nodes), device {DEVICE}")
    for key, target in (
        ("full_evals_per_s", ">= 200"),
        ("full_evals_cold_per_s", ""),
        ("edits_per_s", ""),
        ("child_hashes_per_s", ""),
        ("incremental_per_s", ">= 20x full"),
        ("incremental_speedup", ">= 20"),
    ):
        print(f"  {key:<24}{costs[key]:>12,.1f}  {target}")
    gpt2_full = next(r for r in imports if r["model"] == "gpt2-full")
    checks = {
        "gpt2_full_import_under_10s": gpt2_full["total_s"] < 10,
        "full_evals_at_least_200_per_s": costs["full_evals_per_s"] >= 200,
        "incremental_at_least_20x": costs["incremental_speedup"] >= 20,
        "no_opaque_nodes": all(r["opaque"] == 0 for r in imports),
    }
    print("  targets:", ", ".join(f"{k}={'PASS' if v else 'FAIL'}" for k, v in checks.items()))
    path = write_results(
        "bench_rewrite_ir",
        {
            "seed": SEED,
            "device_profile": DEVICE,
            "torch_threads": torch.get_num_threads(),
            "imports": imports,
            "cost": costs,
            "targets": checks,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
