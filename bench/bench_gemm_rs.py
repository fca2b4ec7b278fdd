"""Benchmark (not a test): fused GEMM-RS vs torch GEMM + reduce-scatter, and the fused kernel's GEMM
core vs ``torch.mm``, as ratios side by side in one run.

    torchrun --nproc-per-node W bench/bench_gemm_rs.py [--ms 128,...,16384] [--n 7168] [--k 2048] [--plot out.png]

Method, per M (N and the per-rank K fixed):

1. Correctness before timing: the fused result is checked on every rank against the fp64 truth with the
   suite's derived budget (properties.within_tolerance) and bitwise against the oracle on exact inputs;
   a failure stops the benchmark for that M.
2. CUDA graphs: each implementation is captured as ``reps`` back-to-back calls over ``sets`` rotated input
   buffers (working set > 2x L2, so L2 flatters nobody); one sample = one replay / reps, timed with events.
3. The max over ranks per sample (all ranks replay together after a barrier; a collective is as slow as
   its slowest rank), then the median of >= 20 samples.
4. GEMM core vs torch.mm: the same fused kernel at W = 1 (a singleton group) against torch.mm on the
   same rotated buffers, on rank 0 while the other ranks wait.

Topology. One GPU per rank (``multi-gpu``, NCCL): every column is printed. Ranks sharing one GPU
(``shared-gpu``, gloo): the ranks time-slice one GPU and the unfused path stages through the host, so
cross-rank timings mean nothing; the benchmark says so and prints only the correctness verdict and the
GEMM-core columns (measured on rank 0 alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import graph_samples  # noqa: E402

L2_BYTES = 60 * 2**20
SHARED_NOTE = ("shared-gpu: the W ranks time-slice one GPU, so fused-vs-unfused timings are meaningless "
               "and are not printed; correctness is checked and the GEMM core is timed on rank 0 alone")


def render_table(rows: list[dict], shared: bool) -> str:
    head = (f"{'M':>6} | {'check':>10} | {'fused us':>9} {'torch mm+RS us':>14} {'speedup':>7} | "
            f"{'core TF/s':>9} {'mm TF/s':>8} {'core/mm':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if shared or r.get("fused_s") is None:
            cross = f"{'n/a':>9} {'n/a':>14} {'n/a':>7}"
        else:
            cross = f"{r['fused_s'] * 1e6:>9.1f} {r['unfused_s'] * 1e6:>14.1f} {r['unfused_s'] / r['fused_s']:>6.2f}x"
        core = (f"{r['core_tflops']:>9.1f} {r['mm_tflops']:>8.1f} {r['core_tflops'] / r['mm_tflops']:>6.2f}x"
                if r.get("core_tflops") else f"{'n/a':>9} {'n/a':>8} {'n/a':>7}")
        lines.append(f"{r['M']:>6} | {r['check']:>10} | {cross} | {core}")
    if shared:
        lines.append(f"NOTE: {SHARED_NOTE}")
    return "\n".join(lines)


def plot(rows: list[dict], shared: bool, path: str, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not available ({exc})"
    ms = [r["M"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    if not shared:
        ax.plot(ms, [r["unfused_s"] / r["fused_s"] for r in rows], "o-", label="fused GEMM-RS / (torch mm + RS)")
    ax.plot(ms, [r["core_tflops"] / r["mm_tflops"] for r in rows], "s-", label="GEMM core / torch.mm")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("speedup (higher is better)")
    ax.set_title(title + ("\n(shared GPU: cross-rank ratio not measurable)" if shared else ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main() -> int:  # noqa: C901 — a linear script
    import torch
    import torch.distributed as dist

    from kernel.fused import FusedGemmRs
    from kernel.unfused import UnfusedGemmRs
    from oracle import make_w, make_x, reference_gemm_rs, seeded_shard_truth
    from properties import bitwise_equal, within_tolerance

    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--n", type=int, default=7168)
    ap.add_argument("--k", type=int, default=2048, help="K per rank")
    ap.add_argument("--reps", type=int, default=8, help="calls per graph")
    ap.add_argument("--samples", type=int, default=25, help="graph replays timed (median of these)")
    ap.add_argument("--plot", default=None, help="PNG path for the ratio plot")
    args = ap.parse_args()
    if args.samples < 20:
        raise SystemExit("--samples must be >= 20")
    W = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    shared = torch.cuda.device_count() < W
    dist.init_process_group("gloo" if shared else "nccl")
    ctrl = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    dev = torch.device("cuda", 0 if shared else local)
    torch.cuda.set_device(dev)
    singles = [dist.new_group([r]) for r in range(W)]
    ms = [int(m) for m in args.ms.split(",")]
    N, K, max_m = args.n, args.k, max(ms)
    fused = FusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev, force_fused=W in (1, 2, 4, 8))
    unfused = UnfusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev)
    core = FusedGemmRs(singles[rank], max_M=max_m, N=N, K=K, device=dev, force_fused=True)

    def timed_graph(calls) -> list[float]:
        return graph_samples(torch, calls, args.samples, before_each=lambda: dist.barrier(group=ctrl))

    def max_over_ranks(samples: list[float]) -> float:
        t = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctrl)
        return statistics.median(t.tolist())

    rows = []
    for M in ms:
        S = -(-M // W)
        row = {"M": M}
        # 1. correctness first
        verdicts = []
        for kind in ("gaussian", "exact"):
            x, w = make_x(M, rank, M, K, W, kind).to(dev), make_w(M, rank, N, K, W, kind).to(dev)
            y = fused(x, w)
            truth = seeded_shard_truth(M, kind, rank, M, N, K, W, device=dev)
            verdicts.append(within_tolerance(y, truth, rank=rank))
            if kind == "exact":
                verdicts.append(bitwise_equal(y, reference_gemm_rs(x, w), truth.n_valid, rank=rank))
        ok = torch.tensor([int(all(v.passed for v in verdicts))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=ctrl)
        row["check"] = "ok" if ok.item() else "FAIL"
        if not ok.item():
            for v in verdicts:
                if not v.passed:
                    print(v.render(), flush=True)
            rows.append(row)
            continue
        # 2. rotated buffers, graphs
        set_bytes = 2 * (M * K + N * K + S * N)
        nsets = max(2, min(args.reps, -(-2 * L2_BYTES // set_bytes)))
        xs = [torch.randn(M, K, device=dev).bfloat16() for _ in range(nsets)]
        ws = [(torch.randn(N, K, device=dev) / K**0.5).bfloat16() for _ in range(nsets)]
        outs = [torch.empty(S, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
        sets = [(xs[i % nsets], ws[i % nsets], outs[i % nsets]) for i in range(args.reps)]
        if not shared:
            row["fused_s"] = max_over_ranks(timed_graph([lambda a=a, b=b, c=c: fused(a, b, out=c) for a, b, c in sets]))
            row["unfused_s"] = max_over_ranks(
                timed_graph([lambda a=a, b=b, c=c: unfused(a, b, out=c) for a, b, c in sets]))
        # 4. GEMM core vs torch.mm, rank 0 alone
        dist.barrier(group=ctrl)
        if rank == 0:
            ys = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
            full = [(xs[i % nsets], ws[i % nsets], ys[i % nsets]) for i in range(args.reps)]
            flops = 2.0 * M * N * K
            core_calls = [lambda a=a, b=b, c=c: core(a, b, out=c) for a, b, c in full]
            mm_calls = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in full]
            t_core = statistics.median(graph_samples(torch, core_calls, args.samples))
            t_mm = statistics.median(graph_samples(torch, mm_calls, args.samples))
            row["core_tflops"], row["mm_tflops"] = flops / t_core / 1e12, flops / t_mm / 1e12
        dist.barrier(group=ctrl)
        rows.append(row)
        if rank == 0:
            print(f"M={M} done: {row}", flush=True)
    if rank == 0:
        topo = "shared-gpu (W ranks on one GPU, gloo)" if shared else "multi-gpu (one GPU per rank, NCCL)"
        title = f"{torch.cuda.get_device_name(dev)}, W={W} {topo}, N={N}, K/rank={K}"
        print(title)
        print(render_table(rows, shared))
        if args.plot:
            why = plot([r for r in rows if r.get("core_tflops")], shared, args.plot, title)
            print(f"plot: {args.plot}" if why is None else f"plot not written: {why}")
    fused.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
