"""Encode/decode throughput of `spaces.Space` (issue: foundation).

Space: 40 parameters (39 scalars of every type plus a 32-way rule-prior simplex).
Measures: validate + encode (`to_unit`) and decode (`from_unit`) of 10,000 configurations,
best of 5. Target: encode + decode under 1 second. Peer: the same round trip written the way a
user would wire it by hand for Optuna/Ax (a per-config Python loop), for a ratio.
"""

from __future__ import annotations

import argparse

from benchmarks._common import timeit, write_results
from spaces import Bool, Choice, Float, Int, Simplex, Space


def build_space() -> Space:
    params: dict = {}
    for i in range(13):
        params[f"f{i}"] = Float(1e-3, 10.0, log=i % 2 == 0)
    for i in range(13):
        params[f"i{i}"] = Int(1, 512, log=i % 2 == 0)
    for i in range(7):
        params[f"c{i}"] = Choice(["a", "b", "c", "d"], ordered=i % 2 == 0)
    for i in range(6):
        params[f"b{i}"] = Bool()
    params["priors"] = Simplex([f"rule{i}" for i in range(32)])
    return Space(params)


def naive_round_trip(space: Space, configs: list[dict]) -> None:
    """Per-configuration loop: what wiring a flat tuner by hand looks like."""
    rows = []
    for c in configs:
        space.validate(c)
        rows.append(space.to_unit([c]))
    for r in rows:
        space.from_unit(r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    space = build_space()
    configs = space.sample(args.n, seed=args.seed)
    X = space.to_unit(configs)
    t_enc = timeit(lambda: space.to_unit(configs))
    t_dec = timeit(lambda: space.from_unit(X))
    t_sample = timeit(lambda: space.sample(args.n, seed=args.seed), repeat=3)
    n_naive = min(args.n, 1000)
    t_naive = timeit(lambda: naive_round_trip(space, configs[:n_naive]), repeat=1) * (
        args.n / n_naive
    )
    total = t_enc + t_dec
    print(f"space: {len(space)} parameters, d = {space.dim} unit columns, n = {args.n}")
    print(f"{'step':<28}{'seconds':>10}")
    for label, t in [
        ("validate + encode", t_enc),
        ("decode", t_dec),
        ("encode + decode", total),
        ("Sobol sample", t_sample),
        ("per-config loop (scaled)", t_naive),
    ]:
        print(f"{label:<28}{t:>10.3f}")
    print(f"target encode + decode < 1 s: {'met' if total < 1.0 else 'MISSED'}")
    print(f"batched vs per-config loop: {t_naive / total:.1f}x faster")
    path = write_results(
        "bench_spaces",
        {
            "n": args.n,
            "seed": args.seed,
            "n_parameters": len(space),
            "dim": space.dim,
            "seconds": {"encode": t_enc, "decode": t_dec, "sample": t_sample, "naive": t_naive},
            "target_met": total < 1.0,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
