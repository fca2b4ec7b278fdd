"""Fuzz-engine throughput (a benchmark, not a timed test): pool start-up cost and verified cases per
minute for small shapes, on this machine.

    python bench/bench_fuzz.py [--world-size 2] [--cases 200] [--impl unfused] [--topology cpu]

A "verified case" is one compute case run end to end: Hypothesis-style random M in 1..1024, inputs built
on every rank, implementation and oracle called, fp64 truth, every property checked, verdict agreed by
all-reduce, result back to the driver. Cases are drawn with a fixed seed, so runs compare.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz.case import Case, PoolSpec  # noqa: E402
from fuzz.pool import RankPool  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--impl", default="unfused")
    ap.add_argument("--topology", default="cpu")
    ap.add_argument("--starts", type=int, default=3, help="pool start-ups to time")
    args = ap.parse_args()
    spec = PoolSpec(impl=args.impl, topology=args.topology, world_size=args.world_size, optimize=sys.flags.optimize)
    starts = []
    for _ in range(args.starts):
        pool = RankPool(spec)
        t0 = time.perf_counter()
        pool.start()
        starts.append(time.perf_counter() - t0)
        pool.close()
    pool = RankPool(spec)
    pool.start()
    rng = random.Random(0)
    kinds = ["gaussian", "exact", "small", "nonfinite"]
    per_case, statuses = [], {}
    t0 = time.perf_counter()
    for i in range(args.cases):
        case = Case("compute", seed=i, N=rng.choice([64, 128, 192]), K=rng.choice([64, 128]), max_M=1024,
                    ms=[rng.randint(1, 1024) for _ in range(rng.randint(1, 2))], kind=rng.choice(kinds))
        t = time.perf_counter()
        report = pool.run(case)
        per_case.append(time.perf_counter() - t)
        statuses[report.status] = statuses.get(report.status, 0) + 1
    wall = time.perf_counter() - t0
    pool.close()
    print(f"machine: {os.cpu_count()} cores; impl {args.impl}, topology {args.topology}, W={args.world_size}, "
          f"python optimize={sys.flags.optimize}")
    print(f"pool start-up: median {statistics.median(starts):.2f}s over {len(starts)} starts "
          f"(min {min(starts):.2f}s, max {max(starts):.2f}s)")
    print(f"verified cases: {args.cases} in {wall:.1f}s = {60 * args.cases / wall:.0f} cases/min "
          f"(median {1000 * statistics.median(per_case):.0f} ms/case, p90 "
          f"{1000 * sorted(per_case)[int(0.9 * len(per_case))]:.0f} ms); statuses {statuses}")
    return 0 if statuses.get("passed", 0) == args.cases else 1


if __name__ == "__main__":
    sys.exit(main())
