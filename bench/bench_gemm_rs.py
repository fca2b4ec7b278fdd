"""Benchmark (not a test): the fused GEMM-RS (both protocols) vs torch mm + NCCL reduce-scatter, vs PyTorch
async-TP, vs the physical bound, and the fused GEMM core vs ``torch.mm``, as ratios side by side in one run.

    torchrun --nproc-per-node W bench/bench_gemm_rs.py [--shapes 7168x2048,8192x14336] [--ms 128,...,16384]
                                                       [--nvlink-gbs GB/s] [--write-crossover] [--plot out.png]

Method, per (N, K) and M (K is per rank):

1. Correctness before timing, every implementation timed: exact-integer inputs (different on every rank,
   every partial and sum exactly representable in bf16), the whole result bitwise equal to the oracle
   (torch GEMM + ``reduce_scatter_tensor``); and at the smallest M of each shape, Gaussian inputs within
   the suite's derived bound of the fp64 truth (properties.within_tolerance). A failure stops the timing
   of that M and prints the located mismatch.
2. CUDA graphs: each implementation captured as ``reps`` back-to-back calls over rotated input buffers
   (working set > 2x L2, so L2 flatters nobody); one sample = one replay / reps, timed with events.
3. The max over ranks per sample (all ranks replay together after a barrier; a collective is as slow as its
   slowest rank), then the median of >= 20 samples.
4. Columns: fused pull (``fused``, the default protocol), fused push (``kernel.fused.FusedGemmRsPush``),
   torch mm + NCCL reduce-scatter (``UnfusedGemmRs``), PyTorch async-TP
   (``torch.ops.symm_mem.fused_matmul_reduce_scatter`` as ``kernel/adapters/torch_async_tp.py`` calls it;
   it needs M % W == 0), torch.mm of the local (M x K) x (K x N) alone, and the physical bound
   ``max(T_mm, (W-1)/W * M*N*2 B / NVLink bandwidth)``. The NVLink bandwidth is measured in the same run
   (every rank copies 256 MiB into the next rank's symmetric buffer at once, copy engine, median of 10,
   bytes per second per direction) unless ``--nvlink-gbs`` gives it.
5. GEMM core vs torch.mm: the push configs' fused kernel at W = 1 (a singleton group) against torch.mm on
   the same rotated buffers, on rank 0 while the other ranks wait.
6. ``should_run`` crossover: per (N, K, W, protocol), the smallest measured M from which the fused kernel
   beats torch mm + RS at that M and every larger one; ``--write-crossover`` merges it into
   ``kernel/fused/crossover.json``, which the wrapper reads (multi-gpu only).

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
#: Timed implementations: row key -> column title.
TIMED = {"fused_s": "pull us", "push_s": "push us", "unfused_s": "mm+RS us", "asynctp_s": "asyncTP us",
         "mm_s": "mm us", "bound_s": "bound us"}


def _ratio(num, den) -> str:
    return f"{num / den:>6.2f}x" if num and den else f"{'n/a':>7}"


def render_table(rows: list[dict], shared: bool) -> str:
    """One line per M: the check, the times (us), the speedups of the fused kernels over torch mm + RS and
    async-TP, push over the physical bound (>= 1; 1 is the bound), and the GEMM core over torch.mm."""
    head = (f"{'M':>6} | {'check':>6} | " + " ".join(f"{t:>10}" for t in TIMED.values())
            + f" | {'pull/mmRS':>9} {'push/mmRS':>9} {'push/aTP':>8} {'push/bnd':>8} | {'core/mm':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        times = " ".join(f"{'n/a':>10}" if shared or r.get(k) is None else f"{r[k] * 1e6:>10.1f}" for k in TIMED)
        if shared:
            ratios = f"{'n/a':>9} {'n/a':>9} {'n/a':>8} {'n/a':>8}"
        else:
            g = r.get
            ratios = (f"{_ratio(g('unfused_s'), g('fused_s')):>9} {_ratio(g('unfused_s'), g('push_s')):>9} "
                      f"{_ratio(g('asynctp_s'), g('push_s')):>8} {_ratio(g('push_s'), g('bound_s')):>8}")
        core = _ratio(r.get("core_tflops"), r.get("mm_tflops"))
        lines.append(f"{r['M']:>6} | {r['check']:>6} | {times} | {ratios} | {core:>7}")
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
    fig, ax = plt.subplots(figsize=(7, 4))
    series = [("fused_s", "unfused_s", "o-", "fused pull / (torch mm + RS)"),
              ("push_s", "unfused_s", "^-", "fused push / (torch mm + RS)"),
              ("push_s", "asynctp_s", "v-", "fused push / async-TP")]
    if not shared:
        for ours, base, style, label in series:
            pts = [(r["M"], r[base] / r[ours]) for r in rows if r.get(ours) and r.get(base)]
            if pts:
                ax.plot(*zip(*pts), style, label=label)
        pts = [(r["M"], r["bound_s"] / r["push_s"]) for r in rows if r.get("push_s") and r.get("bound_s")]
        if pts:
            ax.plot(*zip(*pts), "k--", label="physical bound / fused push")
    pts = [(r["M"], r["core_tflops"] / r["mm_tflops"]) for r in rows if r.get("core_tflops") and r.get("mm_tflops")]
    if pts:
        ax.plot(*zip(*pts), "s-", label="GEMM core / torch.mm")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("speedup (higher is better)")
    ax.set_title(title + ("\n(shared GPU: cross-rank ratios not measurable)" if shared else ""), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def crossovers(rows: list[dict], N: int, K: int, W: int, machine: str, command: str) -> list[dict]:
    """Crossover entries (kernel/fused/crossover.json) of both protocols from one shape's rows."""
    from datetime import date

    from kernel.fused.crossover import crossover_from_timings

    out = []
    for key, protocol in (("fused_s", "pull"), ("push_s", "push")):
        timings = {r["M"]: (r[key], r["unfused_s"]) for r in rows if r.get(key) and r.get("unfused_s")}
        if timings:
            out.append({"N": N, "K": K, "W": W, "protocol": protocol, "min_m": crossover_from_timings(timings),
                        "measured": date.today().isoformat(), "machine": machine, "command": command})
    return out


def measure_nvlink_gbs(torch, dist, group, dev, ctrl) -> float:
    """Bytes per second per direction, as GB/s: every rank copies 256 MiB into the next rank's symmetric
    buffer at the same time (copy engine over NVLink), median of 10, max time over ranks."""
    import torch.distributed._symmetric_memory as symm_mem

    from kernel.fused.workspace import use_cuda_backend

    use_cuda_backend(dev)  # the backend the kernels' workspaces use
    nbytes = 256 * 2**20
    buf = symm_mem.empty(nbytes, dtype=torch.uint8, device=dev)
    handle = symm_mem.rendezvous(buf, group if group is not None else dist.group.WORLD)
    peer = handle.get_buffer((handle.rank + 1) % handle.world_size, (nbytes,), torch.uint8)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=dev)
    times = []
    for i in range(12):
        dist.barrier(group=ctrl)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        peer.copy_(src)
        b.record()
        b.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(b) / 1e3)
    handle.barrier()
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctrl)
    return nbytes / float(t) / 1e9


def main() -> int:  # noqa: C901 — a linear script
    import torch
    import torch.distributed as dist

    from kernel.adapters.torch_async_tp import TorchAsyncTpGemmRs
    from kernel.fused import FusedGemmRs, FusedGemmRsPush
    from kernel.unfused import UnfusedGemmRs
    from oracle import make_w, make_x, reference_gemm_rs, seeded_shard_truth
    from properties import bitwise_equal, within_tolerance

    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--shapes", default="7168x2048,8192x14336", help="N x K-per-rank, comma separated")
    ap.add_argument("--reps", type=int, default=8, help="calls per graph")
    ap.add_argument("--samples", type=int, default=25, help="graph replays timed (median of these)")
    ap.add_argument("--nvlink-gbs", type=float, default=None,
                    help="NVLink bandwidth per direction for the bound (default: measured in this run)")
    ap.add_argument("--no-asynctp", action="store_true", help="skip the async-TP column")
    ap.add_argument("--write-crossover", action="store_true",
                    help="merge the measured should_run crossovers into kernel/fused/crossover.json (multi-gpu)")
    ap.add_argument("--plot", default=None, help="PNG path for the ratio plot (shape index appended)")
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
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    max_m = max(ms)
    forced = W in (1, 2, 4, 8, 16)
    if shared or args.nvlink_gbs is not None or W == 1:
        nvlink_gbs, nvlink_src = args.nvlink_gbs, "given" if args.nvlink_gbs is not None else "n/a"
    else:
        nvlink_gbs, nvlink_src = measure_nvlink_gbs(torch, dist, None, dev, ctrl), "measured"
    machine = f"{W}x {torch.cuda.get_device_name(dev)} ({'shared-gpu' if shared else 'multi-gpu'})"
    command = "torchrun --nproc-per-node {} bench/bench_gemm_rs.py {}".format(W, " ".join(sys.argv[1:]))

    def timed_graph(calls) -> list[float]:
        return graph_samples(torch, calls, args.samples, before_each=lambda: dist.barrier(group=ctrl))

    def max_over_ranks(samples: list[float]) -> float:
        t = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctrl)
        return statistics.median(t.tolist())

    def exact_inputs(M, N, K):
        """Integers in [-2, 2] in the first 8 columns of K, different per rank: every partial (|p| <= 32) and
        sum exact in bf16, so any correct implementation is bitwise equal to the oracle."""
        g = torch.Generator(device=dev).manual_seed(1000 * M + 17 * rank + N)
        x = torch.zeros(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.zeros(N, K, device=dev, dtype=torch.bfloat16)
        x[:, :8] = torch.randint(-2, 3, (M, 8), device=dev, generator=g).bfloat16()
        w[:, :8] = torch.randint(-2, 3, (N, 8), device=dev, generator=g).bfloat16()
        return x, w

    all_rows, entries = {}, []
    for N, K in shapes:
        impls = {
            "fused_s": FusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev, force_fused=forced),
            "push_s": FusedGemmRsPush(None, max_M=max_m, N=N, K=K, device=dev),
            "unfused_s": UnfusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev),
        }
        if not args.no_asynctp and not shared:
            impls["asynctp_s"] = TorchAsyncTpGemmRs(None, max_M=max_m, N=N, K=K, device=dev)
        core = FusedGemmRsPush(singles[rank], max_M=max_m, N=N, K=K, device=dev)
        rows = []
        for M in ms:
            S = -(-M // W)
            row = {"M": M}
            # 1. correctness first: every timed implementation, exact inputs bitwise; Gaussian at the smallest M
            verdicts = []
            x, w = exact_inputs(M, N, K)
            ref = reference_gemm_rs(x, w)
            n_valid = max(0, min(S, M - rank * S))
            for name, impl in impls.items():
                if name == "asynctp_s" and M % W:
                    continue
                verdicts.append((name, bitwise_equal(impl(x, w), ref, n_valid, rank=rank)))
            if M == min(ms):
                xg, wg = make_x(M, rank, M, K, W, "gaussian").to(dev), make_w(M, rank, N, K, W, "gaussian").to(dev)
                truth = seeded_shard_truth(M, "gaussian", rank, M, N, K, W, device=dev)
                for name in ("fused_s", "push_s"):
                    verdicts.append((name, within_tolerance(impls[name](xg, wg), truth, rank=rank)))
            ok = torch.tensor([int(all(v.passed for _, v in verdicts))])
            dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=ctrl)
            row["check"] = "ok" if ok.item() else "FAIL"
            if not ok.item():
                for name, v in verdicts:
                    if not v.passed:
                        print(f"[rank {rank}] N={N} K={K} M={M} {name}: {v.render()}", flush=True)
                rows.append(row)
                continue
            # 2. rotated buffers, graphs
            set_bytes = 2 * (M * K + N * K + S * N)
            nsets = max(2, min(args.reps, -(-2 * L2_BYTES // set_bytes)))
            xs = [torch.randn(M, K, device=dev).bfloat16() for _ in range(nsets)]
            ws = [(torch.randn(N, K, device=dev) / K**0.5).bfloat16() for _ in range(nsets)]
            outs = [torch.empty(S, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
            sets = [(xs[i % nsets], ws[i % nsets], outs[i % nsets]) for i in range(args.reps)]
            ys = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
            full = [(xs[i % nsets], ws[i % nsets], ys[i % nsets]) for i in range(args.reps)]
            if not shared:
                for name, impl in impls.items():
                    if name == "asynctp_s":  # allocates its output: no out=
                        if M % W == 0:
                            calls = [lambda a=a, b=b, i=impl: i(a, b) for a, b, _ in sets]
                            row[name] = max_over_ranks(timed_graph(calls))
                        continue
                    row[name] = max_over_ranks(timed_graph([lambda a=a, b=b, c=c, i=impl: i(a, b, out=c)
                                                            for a, b, c in sets]))
                mm_calls = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in full]
                row["mm_s"] = max_over_ranks(timed_graph(mm_calls))
                if nvlink_gbs:
                    row["bound_s"] = max(row["mm_s"], (W - 1) / W * M * N * 2 / (nvlink_gbs * 1e9))
            # 5. GEMM core vs torch.mm, rank 0 alone
            dist.barrier(group=ctrl)
            if rank == 0:
                flops = 2.0 * M * N * K
                core_calls = [lambda a=a, b=b, c=c, i=core: i(a, b, out=c) for a, b, c in full]
                mm_calls = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in full]
                t_core = statistics.median(graph_samples(torch, core_calls, args.samples))
                t_mm = statistics.median(graph_samples(torch, mm_calls, args.samples))
                row["core_tflops"], row["mm_tflops"] = flops / t_core / 1e12, flops / t_mm / 1e12
                row["core_tiles"] = "{}x{}".format(*_tile(core, M))
            dist.barrier(group=ctrl)
            rows.append(row)
            if rank == 0:
                print(f"N={N} K={K} M={M} done: {row}", flush=True)
        all_rows[(N, K)] = rows
        if not shared:
            entries += crossovers(rows, N, K, W, machine, command)
        for impl in list(impls.values()) + [core]:
            impl.close()
    if rank == 0:
        topo = "shared-gpu (W ranks on one GPU, gloo)" if shared else "multi-gpu (one GPU per rank, NCCL)"
        bw = f"{nvlink_gbs:.0f} GB/s per direction ({nvlink_src})" if nvlink_gbs else "n/a"
        for (N, K), rows in all_rows.items():
            title = f"{torch.cuda.get_device_name(dev)}, W={W} {topo}, N={N}, K/rank={K}, NVLink {bw}"
            print("\n" + title)
            print(render_table(rows, shared))
            if args.plot:
                path = args.plot if len(all_rows) == 1 else args.plot.replace(".png", f"_{N}x{K}.png")
                why = plot(rows, shared, path, title)
                print(f"plot: {path}" if why is None else f"plot not written: {why}")
        for e in entries:
            print(f"crossover N={e['N']} K={e['K']} W={e['W']} {e['protocol']}: "
                  f"should_run from M >= {e['min_m'] if e['min_m'] is not None else 'never (unfused everywhere)'}")
        if args.write_crossover and entries:
            from kernel.fused.crossover import TABLE_PATH, write_entries

            write_entries(entries)
            print(f"crossover table written: {TABLE_PATH}")
        elif args.write_crossover:
            print("crossover table NOT written: no cross-rank timings (shared-gpu, or every check failed)")
    dist.destroy_process_group()
    return 0


def _tile(impl, M) -> tuple[int, int]:
    c = impl.tile_configs()[impl.tile_config_index(M)]
    return c.tile_m, c.tile_n


if __name__ == "__main__":
    sys.exit(main())
