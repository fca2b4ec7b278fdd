"""Rerun one case exactly: ``python -m fuzz.repro --impl I --topology T --world-size W --case JSON``.

Starts a fresh pool of the same kind (``python -O`` here gives ranks optimize level 1), runs the case,
prints the report and ``verdict: <STATUS>``, exits 0 if it passed and 1 otherwise (2 on bad arguments).
Every failure the suite reports ends with such a line (REPRO: ...).
"""

from __future__ import annotations

import argparse
import sys

from .case import Case, PoolSpec
from .pool import RankPool


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.repro", description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="unfused")
    ap.add_argument("--topology", default="cpu", choices=("cpu", "shared-gpu", "multi-gpu"))
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--case", required=True, help="the case as JSON (from a REPRO line)")
    ap.add_argument("--deadline", type=float, default=None)
    ap.add_argument("--sanitizer", default=None, help="run the ranks under compute-sanitizer --tool=THIS")
    args = ap.parse_args(argv)
    case = Case.from_json(args.case)
    spec = PoolSpec(impl=args.impl, topology=args.topology, world_size=args.world_size,
                    optimize=sys.flags.optimize, sanitizer=args.sanitizer)
    pool = RankPool(spec, gpus=None)
    try:
        report = pool.run(case, deadline=args.deadline)
    finally:
        pool.close()
    print(report.render())
    print(f"verdict: {report.status.upper()}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
