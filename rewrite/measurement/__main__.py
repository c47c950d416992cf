"""``python -m rewrite.measurement --out profile.json``: calibrate a device profile (`main`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rewrite.measurement.calibration import calibrate


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rewrite.measurement --out profile.json [--name N] [--threads T]``."""
    import argparse

    import torch

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--out", required=True, help="profile JSON to write")
    ap.add_argument(
        "--name",
        default=None,
        help="profile name (default <device>-measured, <device>-compiled with --compile)",
    )
    ap.add_argument("--device", default=None, help="torch device (default cuda if present)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--compile",
        action="store_true",
        help="time the graphs compiled by torch.compile: a profile for models that will be",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    c = calibrate(
        args.device,
        name=args.name,
        out=args.out,
        repeats=args.repeats,
        seed=args.seed,
        compile=args.compile,
    )
    print(json.dumps(c.profile.provenance["fit"], indent=1))


if __name__ == "__main__":
    main()
