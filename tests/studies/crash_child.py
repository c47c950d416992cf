"""A study process for the crash tests: ``python -m tests.studies.crash_child URL BUDGET [opts]``.

Prints ``ready`` once the study is open (imports done), then (after a line on stdin with
``--wait-go``) drives it to BUDGET trials. With ``--hang-in-propose`` its first proposal prints
``proposing`` and never returns (a driver to kill while it holds proposal reservations).
"""

from __future__ import annotations

import argparse
import sys
import time

from studies.examples import toy_space
from studies.study import Study
from tests.studies import helpers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("budget", type=int)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default="crash")
    parser.add_argument("--n-initial", type=int, default=4)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--grace-only", action="store_true", help="no dead-pid shortcut")
    parser.add_argument("--wait-go", action="store_true", help="after 'ready', wait for a line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-in-propose", action="store_true")
    args = parser.parse_args()
    settings = helpers.fast_settings(
        n_initial=args.n_initial,
        reap_dead_local_workers=not args.grace_only,
        grace_period=args.grace,
    )
    study = Study(
        args.name,
        toy_space(),
        {"latency": "minimize", "search_seconds": "minimize"},
        helpers.slow_toy,
        storage=args.url,
        seed=args.seed,
        settings=settings,
    )
    if args.hang_in_propose:
        study._propose = _hang  # type: ignore[method-assign]
    print("ready", flush=True)
    if args.wait_go:
        sys.stdin.readline()
    study.optimize(args.budget, n_workers=args.workers, progress=False)
    print("done", flush=True)
    sys.exit(0)


def _hang(*args: object) -> list[dict[str, object]]:
    print("proposing", flush=True)
    while True:
        time.sleep(1.0)


if __name__ == "__main__":
    main()
