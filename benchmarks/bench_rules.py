"""Rule matching, application and verification throughput (issue: rules and verification).

Measures, on one core (BLAS threads pinned to 1):

* sites found per second across the whole catalogue on the 12-layer GPT-2 (``gpt2-full``),
  best of 5 (target: all sites of all rules in under 0.5 s);
* rule applications per second (every site of every rule, applied to that graph);
* cold region checks per second with numpy: for sampled sites of the 2-layer GPT-2 (and, for
  scale, of the 12-layer one), cut out the region, rewrite it and test it in the finite field
  with an empty verdict cache and an empty memo (target: at least 1,000 per second). Rates are
  given per CPU second of this process (``time.process_time``), because the machine is shared;
  wall-clock rates are printed and stored too;
* a whole-graph check of the 2-layer GPT-2 against a rewritten copy: cold, and again as a
  memoized `check_rewrite` of a second child (only new nodes recomputed);
* z3 proof time of the whole catalogue without the proof cache.

Peers in the same run: the whole-graph float-mode check (the reference evaluator's semantics)
next to the field check.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from benchmarks._common import timeit, write_results
from rewrite import zoo
from rewrite.prove import prove_rule
from rewrite.rules import RuleRegistry, catalogue
from rewrite.verify import Verifier
from rewrite.verify.region import region_graphs


def _all_sites(reg: RuleRegistry, g) -> list:  # noqa: ANN001
    return [s for sites in reg.matches(g).values() for s in sites]


def bench_matching(reg: RuleRegistry, g) -> dict:  # noqa: ANN001
    sites = _all_sites(reg, g)
    t = timeit(lambda: reg.matches(g), repeat=5)
    t0 = time.perf_counter()
    for s in sites:
        reg.apply(g, s)
    t_apply = time.perf_counter() - t0
    per_rule = {r.name: len(r.matches(g)) for r in reg}
    return {
        "nodes": len(g),
        "sites": len(sites),
        "match_s": t,
        "sites_per_s": len(sites) / t,
        "applications": len(sites),
        "apply_s": t_apply,
        "applications_per_s": len(sites) / t_apply,
        "rules_with_sites": sum(1 for v in per_rule.values() if v),
        "sites_per_rule": per_rule,
    }


def bench_region_checks(reg: RuleRegistry, g, n: int, seed: int) -> dict:  # noqa: ANN001
    """Region checks of ``n`` sampled sites: strictly cold (fresh verifier, empty memo and no
    verdict cache) and as a search runs them (one verifier per process, no verdict cache)."""
    rng = np.random.default_rng(seed)
    sites = _all_sites(reg, g)
    picks = [sites[i] for i in rng.integers(0, len(sites), size=n)]
    Verifier(mode="auto", tests=2, cache=None).check_site(
        reg[picks[0].rule], g, picks[0]
    )  # imports
    out: dict = {"checks": n, "distinct_sites": len(set(picks))}
    for label, tests, fresh in (
        ("cold", 2, True),
        ("cold_1test", 1, True),
        ("search_verifier", 2, False),
    ):
        shared = Verifier(mode="auto", tests=tests, cache=None)
        ok, w0, c0 = 0, time.perf_counter(), time.process_time()
        for s in picks:
            v = Verifier(mode="auto", tests=tests, cache=None) if fresh else shared
            ok += v.check_site(reg[s.rule], g, s).ok
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        out[label] = {
            "tests": tests,
            "passed": ok,
            "wall_s": wall,
            "cpu_s": cpu,
            "checks_per_s_wall": n / wall,
            "checks_per_s_cpu": n / cpu,
        }
    c0 = time.process_time()
    for s in picks[:100]:
        region_graphs(reg[s.rule], g, s)
    out["cut_and_rewrite_cpu_s"] = (time.process_time() - c0) / min(100, n)
    return out


def bench_whole_graph(reg: RuleRegistry, g) -> dict:  # noqa: ANN001
    fuse = reg["fuse_elementwise"]
    sites = fuse.matches(g)
    child1, child2 = fuse.apply(g, sites[0]), fuse.apply(g, sites[-1])
    out = {"nodes": len(g)}
    for mode in ("field", "float"):
        v = Verifier(mode=mode, tests=2, cache=None)
        t0 = time.perf_counter()
        r1 = v.check(g, child1)
        t1 = time.perf_counter()
        r2 = v.check_rewrite(g, child2)
        t2 = time.perf_counter()
        out[mode] = {
            "cold_s": t1 - t0,
            "memoized_rewrite_s": t2 - t1,
            "ok": r1.ok and r2.ok,
            "bound": r1.bound,
        }
    return out


def bench_proofs() -> dict:
    t0 = time.perf_counter()
    verdicts = [prove_rule(r).verdict for r in catalogue()]
    return {
        "rules": len(verdicts),
        "proved": verdicts.count("proved"),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    reg = RuleRegistry(catalogue(), verify=False)  # the gate is measured separately (bench_proofs)
    big = zoo.build("gpt2", size="full")
    small = zoo.build("gpt2")
    res = {
        "seed": args.seed,
        "load_average": os.getloadavg(),
        "matching_gpt2_full": bench_matching(reg, big),
        "region_checks_gpt2_small": bench_region_checks(reg, small, args.checks, args.seed),
        "region_checks_gpt2_full": bench_region_checks(
            reg, big, max(20, args.checks // 50), args.seed
        ),
        "whole_graph_gpt2_small": bench_whole_graph(reg, small),
        "proofs": bench_proofs(),
    }
    rows = _rows(res)
    print(f"load average at start: {res['load_average']}")
    print(f"{'measure':42s} {'result':48s} {'rate':18s} {'target':12s} ok")
    for name, result, rate, target, ok in rows:
        print(f"{name:42s} {result:48s} {rate:18s} {target:12s} {'yes' if ok else 'NO'}")
    path = write_results("bench_rules", res)
    print(f"wrote {path}")


def _rows(res: dict) -> list[tuple[str, str, str, str, bool]]:
    """The printed table's rows: (measure, result, rate, target, whether the target is met)."""
    m, rs, rf = (
        res["matching_gpt2_full"],
        res["region_checks_gpt2_small"],
        res["region_checks_gpt2_full"],
    )
    w, p = res["whole_graph_gpt2_small"], res["proofs"]
    cs, cf = rs["cold"], rf["cold"]
    rows = [
        (
            "all sites, 12-layer GPT-2",
            f"{m['sites']} sites / {m['nodes']} nodes in {m['match_s'] * 1e3:.1f} ms",
            f"{m['sites_per_s']:,.0f} sites/s",
            "< 0.5 s",
            m["match_s"] < 0.5,
        ),
        (
            "rule applications, 12-layer GPT-2",
            f"{m['applications']} in {m['apply_s']:.2f} s",
            f"{m['applications_per_s']:,.0f} /s",
            "",
            True,
        ),
        (
            "cold region checks, 2-layer GPT-2",
            f"{cs['passed']}/{rs['checks']} ok, 2 tests, fresh verifier",
            f"{cs['checks_per_s_cpu']:,.0f} /s cpu",
            ">= 1,000 /s",
            cs["checks_per_s_cpu"] >= 1000,
        ),
        (
            "  same, wall clock (shared machine)",
            f"{cs['wall_s']:.2f} s wall",
            f"{cs['checks_per_s_wall']:,.0f} /s wall",
            "",
            True,
        ),
        (
            "  1 test per check",
            f"{rs['cold_1test']['passed']} ok",
            f"{rs['cold_1test']['checks_per_s_cpu']:,.0f} /s cpu",
            "",
            True,
        ),
        (
            "  search verifier (memo kept, no cache)",
            f"{rs['search_verifier']['passed']} ok",
            f"{rs['search_verifier']['checks_per_s_cpu']:,.0f} /s cpu",
            "",
            True,
        ),
        (
            "cold region checks, 12-layer GPT-2",
            f"{cf['passed']}/{rf['checks']} ok",
            f"{cf['checks_per_s_cpu']:,.1f} /s cpu",
            "",
            True,
        ),
        (
            "whole graph, 2-layer GPT-2 (field)",
            f"cold {w['field']['cold_s'] * 1e3:.0f} ms, memoized {w['field']['memoized_rewrite_s'] * 1e3:.1f} ms",
            f"bound {w['field']['bound']:.1e}",
            "",
            w["field"]["ok"],
        ),
        (
            "whole graph, 2-layer GPT-2 (float peer)",
            f"cold {w['float']['cold_s'] * 1e3:.0f} ms, memoized {w['float']['memoized_rewrite_s'] * 1e3:.1f} ms",
            "no bound",
            "",
            w["float"]["ok"],
        ),
        (
            "z3 proofs of the catalogue, uncached",
            f"{p['proved']}/{p['rules']} proved",
            f"{p['seconds']:.2f} s",
            "",
            p["proved"] == p["rules"],
        ),
    ]
    return rows


if __name__ == "__main__":
    main()
