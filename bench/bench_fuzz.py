"""Fuzz-engine throughput (a benchmark, not a timed test): where a verified case's time goes, and verified
cases per minute, per topology and world size, with one pool or several side by side.

    python bench/bench_fuzz.py [--topologies cpu,shared-gpu,multi-gpu] [--world-sizes 2,4,8]
                               [--impl unfused|fused|...] [--cases 100] [--pools 1] [--starts 2]

A "verified case" is one compute case run end to end through the gate's own harness (fuzz.pool.RankPool):
random M, inputs built on every rank, the implementation and the oracle called, the fp64 truth, every
property checked, every rank's result back to the driver, the driver's verdict. Cases are drawn with a
fixed seed (shapes from the topology's own lists: N a multiple of 256 on GPUs), so runs compare.

Per row it prints:

* pool start-up (torchrun, process-group init, hello), median of ``--starts``;
* the first case of each shape (``cold``: includes the kernel compile, or its load from the host-wide
  kernel cache, and the oracle's first NCCL/gloo call) against the later ones (``warm``);
* warm cases: the driver's round trip split into the slowest rank's own time (``rank``: inputs, calls,
  oracle, checks) and the rest (``harness``: case and result messages, verdict);
* verified cases/min with ``--pools`` pools running cases at once (shared-gpu pools time-slice one GPU,
  multi-gpu pools need W GPUs each), and the statuses (anything but passed makes the exit status 1).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz.case import Case, PoolSpec  # noqa: E402
from fuzz.phases import PHASES, harness_seconds, slowest_rank  # noqa: E402
from fuzz.pool import RankPool  # noqa: E402
from fuzz.topology import gpu_count  # noqa: E402

#: (N, K) drawn per topology: small shapes on the cpu; GPU shapes the fused kernel takes (N % 256 == 0).
SHAPES = {"cpu": [(64, 64), (128, 128), (192, 64)],
          "shared-gpu": [(512, 256), (1024, 512), (768, 1024)],
          "multi-gpu": [(512, 256), (1024, 512), (768, 1024)]}
KINDS = ["gaussian", "exact", "small", "nonfinite"]


def _cases(n: int, topology: str, seed: int) -> list[Case]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        N, K = rng.choice(SHAPES[topology])
        out.append(Case("compute", seed=seed * 100_000 + i, N=N, K=K, max_M=2048,
                        ms=[rng.randint(1, 2048) for _ in range(rng.randint(1, 2))], kind=rng.choice(KINDS)))
    return out


def _gpus(topology: str, W: int, p: int) -> list[int] | None:
    """Pool ``p``'s GPUs: none on the cpu; shared-gpu pools spread over the GPUs; multi-gpu pools take W
    GPUs each (the benchmark runs alone on its host: no leases)."""
    n = gpu_count()
    if topology == "cpu":
        return None
    if topology == "shared-gpu":
        return [p % max(1, n)]
    if (p + 1) * W > n:
        raise SystemExit(f"{p + 1} multi-gpu pools of W={W} need {(p + 1) * W} GPUs; this host has {n}")
    return list(range(p * W, (p + 1) * W))


def _pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` by nearest rank: the smallest value with at least ``q * len(xs)`` of them at or
    below it (p90 of 1..10 is 9)."""
    return sorted(xs)[max(0, math.ceil(q * len(xs) - 1e-9) - 1)] if xs else float("nan")


def _run_pool(spec: PoolSpec, cases: list[Case], gpus, rows: list[dict]) -> None:
    pool = RankPool(spec, gpus=gpus)
    seen = set()
    try:
        pool.start()
        for case in cases:
            t = time.perf_counter()
            report = pool.run(case)
            total = time.perf_counter() - t
            rank_s = max((m.get("seconds", 0.0) for m in report.ranks.values()), default=0.0)
            shape = (case.N, case.K)
            rows.append({"status": str(report.status), "total": total, "rank": rank_s, "cold": shape not in seen,
                         "phases": slowest_rank(report.ranks)})
            seen.add(shape)
            if not report.passed:
                seen.clear()  # the pool restarts after a non-pass: its next case of each shape is cold again
    finally:
        pool.close()


def _phase_means(rows: list[dict]) -> dict[str, float]:
    """Mean seconds per phase of the slowest rank (fuzz/phases.py), and ``harness``: the rest of the round trip."""
    if not rows:
        return {}
    out = {p: statistics.mean(r["phases"].get(p, 0.0) for r in rows) for p in PHASES}
    out["harness"] = statistics.mean(harness_seconds(r["total"], r["phases"]) for r in rows)
    return out


def measure(impl: str, topology: str, W: int, n_cases: int, pools: int, starts: int) -> dict:
    spec = PoolSpec(impl=impl, topology=topology, world_size=W, optimize=sys.flags.optimize)
    start_s = []
    for _ in range(starts):
        pool = RankPool(spec, gpus=_gpus(topology, W, 0))
        t0 = time.perf_counter()
        pool.start()
        start_s.append(time.perf_counter() - t0)
        pool.close()
    per_pool = [_cases(n_cases // pools, topology, seed=p) for p in range(pools)]
    rows: list[dict] = []
    errors: list[BaseException] = []

    def one(p: int) -> None:
        try:
            _run_pool(spec, per_pool[p], _gpus(topology, W, p), rows)
        except BaseException as exc:  # noqa: BLE001 — reported with the row
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(p,)) for p in range(pools)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    warm = [r for r in rows if not r["cold"]]
    cold = [r for r in rows if r["cold"]]
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {"impl": impl, "topology": topology, "W": W, "pools": pools, "cases": len(rows), "wall": wall,
            "start": statistics.median(start_s) if start_s else float("nan"),
            "cold": statistics.median([r["total"] for r in cold]) if cold else float("nan"),
            "warm": statistics.median([r["total"] for r in warm]) if warm else float("nan"),
            "warm_p90": _pct([r["total"] for r in warm], 0.9),
            "rank": statistics.median([r["rank"] for r in warm]) if warm else float("nan"),
            "harness": statistics.median([r["total"] - r["rank"] for r in warm]) if warm else float("nan"),
            "per_min": 60 * len(rows) / wall if wall else 0.0, "statuses": statuses,
            "phases": {label: _phase_means(group) for label, group in (("cold", cold), ("warm", warm))},
            "errors": [f"{type(e).__name__}: {e}" for e in errors]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/bench_fuzz.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", default="unfused")
    ap.add_argument("--topologies", "--topology", default="cpu", help="comma list: cpu, shared-gpu, multi-gpu")
    ap.add_argument("--world-sizes", "--world-size", default="2", help="comma list")
    ap.add_argument("--cases", type=int, default=100, help="cases per row (split over the pools)")
    ap.add_argument("--pools", type=int, default=1, help="pools running cases at once")
    ap.add_argument("--starts", type=int, default=2, help="pool start-ups to time")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores; impl {args.impl}; python optimize={sys.flags.optimize}; "
          f"GEMM_RS_KERNEL_CACHE_DIR={os.environ.get('GEMM_RS_KERNEL_CACHE_DIR', '(gate default)')}")
    print("| topology | W | pools | cases | start s | cold case s | warm case s (p90) | rank s | harness s "
          "| cases/min | statuses |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    results = []
    for topology in args.topologies.split(","):
        for W in (int(w) for w in args.world_sizes.split(",")):
            r = measure(args.impl, topology, W, args.cases, args.pools, args.starts)
            results.append(r)
            ok &= not r["errors"] and r["statuses"].get("passed", 0) == r["cases"] and r["cases"] > 0
            print(f"| {topology} | {W} | {r['pools']} | {r['cases']} | {r['start']:.2f} | {r['cold']:.2f} | "
                  f"{r['warm']:.3f} ({r['warm_p90']:.3f}) | {r['rank']:.3f} | {r['harness']:.3f} | "
                  f"{r['per_min']:.0f} | {r['statuses']} {'; '.join(r['errors'])} |", flush=True)
    print("\nwhere a case's time goes (mean seconds, slowest rank; cold: first case of a shape in a pool):")
    print("| topology | W | case | " + " | ".join(PHASES + ("harness",)) + " |")
    print("|---|---|---|" + "---|" * (len(PHASES) + 1))
    for r in results:
        for label, means in r["phases"].items():
            if means:
                print(f"| {r['topology']} | {r['W']} | {label} | "
                      + " | ".join(f"{means[p]:.3f}" for p in PHASES + ("harness",)) + " |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
