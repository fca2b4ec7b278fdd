"""Benchmark (not a test): the fused GEMM-RS (both protocols) vs torch mm + NCCL reduce-scatter, vs PyTorch
async-TP, vs the physical bound, and the fused GEMM core vs ``torch.mm``, as ratios side by side in one run.

    torchrun --nproc-per-node W bench/bench_gemm_rs.py [--shapes 7168x2048,8192x14336] [--ms 128,...,16384]
                                                       [--nvlink-gbs GB/s] [--write-crossover] [--plot out.png]
                                                       [--experiment-shapes 7168x2048] [--samples 25]

Method, per (N, K) and M (K is per rank):

1. Correctness before timing, every implementation timed: exact-integer inputs (different on every rank,
   every partial and sum exactly representable in bf16), the whole result bitwise equal to the oracle
   (torch GEMM + ``reduce_scatter_tensor``); and at the smallest M of each shape, Gaussian inputs within
   the suite's derived bound of the fp64 truth (properties.within_tolerance). A failure stops the timing
   of that M and prints the located mismatch, and makes the exit status 1 (the other Ms are still measured).
2. CUDA graphs: each implementation captured as ``reps`` back-to-back calls over rotated input buffers
   (working set > 2x L2, so L2 flatters nobody); one sample = one replay / reps, timed with events.
3. The max over ranks per sample (all ranks replay together after a barrier; a collective is as slow as its
   slowest rank), then the median of >= 20 samples. The columns of one M are captured first and their replays
   interleaved, each sample replaying every column in turn, in reverse order on odd samples
   (``_timing.interleaved_samples``): a GPU at its power cap drifts by hundreds of MHz between blocks of
   replays, which timed one column after the other lands on some columns only (27th session, one H200).
4. Columns: fused pull (``fused``, the default protocol), fused push (``kernel.fused.FusedGemmRsPush``),
   fused auto (``kernel.fused.FusedGemmRsAuto`` with the faster-protocol table this run measured for the
   shape: a second pass over the Ms once pull and push were timed at every M, checked bitwise like the
   others first; it should time as the faster of the two at each M; the last column names its protocol
   there), torch mm + NCCL reduce-scatter (``UnfusedGemmRs``), PyTorch async-TP
   (``torch.ops.symm_mem.fused_matmul_reduce_scatter`` as ``kernel/adapters/torch_async_tp.py`` calls it;
   it needs M % W == 0), torch.mm of the local (M x K) x (K x N) alone, and the physical bound
   ``max(T_mm, (W-1)/W * M*N*2 B / NVLink bandwidth)``. The NVLink bandwidth is measured in the same run
   (every rank copies 256 MiB into the next rank's symmetric buffer at once, copy engine, median of 10,
   bytes per second per direction) unless ``--nvlink-gbs`` gives it.
5. GEMM core vs torch.mm: the push configs' fused kernel at W = 1 (a singleton group) against torch.mm on
   the same rotated buffers, on rank 0 while the other ranks wait.
6. ``should_run`` crossover: per (N, K, W, protocol), the smallest measured M from which the fused kernel
   beats torch mm + RS at that M and every larger one; and per (N, K, W) the faster protocol at each M
   (``protocol="auto"``); ``--write-crossover`` merges both into ``kernel/fused/crossover.json``, which the
   wrapper reads (multi-gpu only).
7. Where the push kernel's time goes (``--experiment-shapes``, multi-gpu): the same push kernel in the
   ``push_first`` order (the first iteration's), with the first iteration's 4-deep epilogue ring
   (``ring4``), with every push redirected into the rank's own memory (``local_push``: the same GEMM and
   TMA stores at local speed, so ``push - local_push`` is what NVLink costs), and with no mainloop
   (``no_mma``: pushes, flags and sums alone: the transfer as the kernel achieves it), next to torch.mm and
   the transfer time at the measured NVLink bandwidth. push_first and ring4 are real kernels and are
   checked like the others; local_push and no_mma compute wrong sums by design and are only timed.

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

from _timing import graph_samples, interleaved_samples  # noqa: E402

L2_BYTES = 60 * 2**20
SHARED_NOTE = ("shared-gpu: the W ranks time-slice one GPU, so fused-vs-unfused timings are meaningless "
               "and are not printed; correctness is checked and the GEMM core is timed on rank 0 alone")
#: Timed implementations: row key -> column title.
TIMED = {"fused_s": "pull us", "push_s": "push us", "auto_s": "auto us", "unfused_s": "mm+RS us",
         "asynctp_s": "aTP us", "mm_s": "mm us", "bound_s": "bound us"}
#: Ratio columns: title -> (numerator key, denominator key); speedups (> 1: ours faster) except x/bnd,
#: ours over the physical bound (>= 1; 1 is the bound).
RATIOS = {"pull/mmRS": ("unfused_s", "fused_s"), "push/mmRS": ("unfused_s", "push_s"),
          "auto/mmRS": ("unfused_s", "auto_s"), "push/aTP": ("asynctp_s", "push_s"),
          "auto/aTP": ("asynctp_s", "auto_s"), "push/bnd": ("push_s", "bound_s"), "auto/bnd": ("auto_s", "bound_s")}
#: The push A/B builds (method 7): row key -> (column title, FusedGemmRsPush options, checked like a real kernel).
EXPERIMENTS = {"push_first_s": ("push_first", {"push_order": "push_first"}, True),
               "ring4_s": ("ring4", {"experiment": "ring4"}, True),
               "local_push_s": ("local_push", {"experiment": "local_push"}, False),
               "no_mma_s": ("no_mma", {"experiment": "no_mma"}, False)}


def _ratio(num, den) -> str:
    return f"{num / den:>6.2f}x" if num and den else f"{'n/a':>7}"


def checked(row: dict) -> bool:
    """Whether ``row``'s correctness check passed: only such a row's timings are shown, fed to the crossovers or
    leave the exit status 0 (a row that carries no check, "FAIL" or anything else did not)."""
    return row.get("check") == "ok"


def render_table(rows: list[dict], shared: bool) -> str:
    """One line per M: the check, the times (us), the speedups of the fused kernels over torch mm + RS and
    async-TP, push and auto over the physical bound (>= 1; 1 is the bound), the GEMM core over torch.mm,
    and the protocol auto ran at that M."""
    head = (f"{'M':>6} | {'check':>6} | " + " ".join(f"{t:>9}" for t in TIMED.values())
            + " | " + " ".join(f"{t:>9}" for t in RATIOS) + f" | {'core/mm':>7} | auto")
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = checked(r)  # a failed check's row shows no time, whatever it carries (method 1)
        times = " ".join(f"{'n/a':>9}" if shared or not ok or r.get(k) is None else f"{r[k] * 1e6:>9.1f}"
                         for k in TIMED)
        ratios = " ".join(f"{'n/a':>9}" if shared or not ok else f"{_ratio(r.get(a), r.get(b)):>9}"
                          for a, b in RATIOS.values())
        core = _ratio(r.get("core_tflops"), r.get("mm_tflops")) if ok else f"{'n/a':>7}"
        lines.append(f"{r['M']:>6} | {r['check']:>6} | {times} | {ratios} | {core:>7} | {r.get('auto_protocol', '')}")
    if shared:
        lines.append(f"NOTE: {SHARED_NOTE}")
    return "\n".join(lines)


def render_experiments(rows: list[dict]) -> str:
    """Where the push kernel's time goes (method 7), us: push and its A/B builds, torch.mm, the transfer
    ``(W-1)/W * M*N*2 B`` at the measured NVLink bandwidth; ``nvl cost`` = push - local_push."""
    cols = [("push_s", "push")] + [(k, v[0]) for k, v in EXPERIMENTS.items()] + [("mm_s", "mm"), ("tx_s", "transfer")]
    head = f"{'M':>6} | " + " ".join(f"{t:>10}" for _, t in cols) + f" | {'nvl cost':>8} {'tiles':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        vals = " ".join(f"{r[k] * 1e6:>10.1f}" if r.get(k) else f"{'n/a':>10}" for k, _ in cols)
        cost = (f"{(r['push_s'] - r['local_push_s']) * 1e6:>8.1f}" if r.get("push_s") and r.get("local_push_s")
                else f"{'n/a':>8}")
        lines.append(f"{r['M']:>6} | {vals} | {cost} {r.get('push_tiles', ''):>7}")
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


def protocol_entry(rows: list[dict], N: int, K: int, W: int, machine: str, command: str) -> dict | None:
    """The ``protocols`` entry of kernel/fused/crossover.json (``protocol="auto"``): the faster protocol at
    each M where both were timed."""
    from datetime import date

    from kernel.fused.crossover import faster_protocol_by_m

    timings = {r["M"]: (r["fused_s"], r["push_s"]) for r in rows
               if checked(r) and r.get("fused_s") and r.get("push_s")}
    if not timings:
        return None
    return {"N": N, "K": K, "W": W, "by_m": faster_protocol_by_m(timings), "measured": date.today().isoformat(),
            "machine": machine, "command": command}


def crossovers(rows: list[dict], N: int, K: int, W: int, machine: str, command: str) -> list[dict]:
    """Crossover entries (kernel/fused/crossover.json) of both protocols from one shape's rows."""
    from datetime import date

    from kernel.fused.crossover import crossover_from_timings

    out = []
    for key, protocol in (("fused_s", "pull"), ("push_s", "push")):
        timings = {r["M"]: (r[key], r["unfused_s"]) for r in rows
                   if checked(r) and r.get(key) and r.get("unfused_s")}
        if timings:
            out.append({"N": N, "K": K, "W": W, "protocol": protocol, "min_m": crossover_from_timings(timings),
                        "measured": date.today().isoformat(), "machine": machine, "command": command})
    return out


def max_over_ranks(torch, dist, group, samples: list[float]) -> float:
    """The median over samples of each sample's slowest rank (method 3): a collective is as slow as its slowest
    rank, and sample i ran on every rank at once (a barrier before each)."""
    t = torch.tensor(samples, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return statistics.median(t.tolist())


def bound_seconds(mm_s: float, M: int, N: int, W: int, nvlink_gbs: float) -> tuple[float, float]:
    """(transfer, physical bound) in seconds: the ``(W-1)/W * M*N*2`` bytes a rank sends at the NVLink bandwidth
    per direction, and the larger of that and torch.mm's time (neither can hide the other more than fully)."""
    tx_s = (W - 1) / W * M * N * 2 / (nvlink_gbs * 1e9)
    return tx_s, max(mm_s, tx_s)


def exit_status(rows: list[dict]) -> int:
    """1 when any M's correctness check failed (its timing not taken), else 0: a benchmark of a wrong kernel is no
    pass (ci/gpu-check's bench steps count this status)."""
    return 1 if not all(checked(r) for r in rows) else 0


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
    from kernel.fused import FusedGemmRs, FusedGemmRsAuto, FusedGemmRsPush
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
    ap.add_argument("--experiment-shapes", default="7168x2048",
                    help="shapes (N x K) with the push A/B builds of method 7, comma separated; '' for none")
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

    def exact_inputs(M, N, K):
        """Integers in [-2, 2] in the first 8 columns of K, different per rank: every partial (|p| <= 32) and
        sum exact in bf16, so any correct implementation is bitwise equal to the oracle."""
        g = torch.Generator(device=dev).manual_seed(1000 * M + 17 * rank + N)
        x = torch.zeros(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.zeros(N, K, device=dev, dtype=torch.bfloat16)
        x[:, :8] = torch.randint(-2, 3, (M, 8), device=dev, generator=g).bfloat16()
        w[:, :8] = torch.randint(-2, 3, (N, 8), device=dev, generator=g).bfloat16()
        return x, w

    def check_exact(impls: dict, M: int, N: int, K: int, skip=()) -> list:
        """(name, verdict) of every implementation in ``impls`` but ``skip``: exact inputs, bitwise."""
        x, w = exact_inputs(M, N, K)
        ref = reference_gemm_rs(x, w)
        n_valid = max(0, min(-(-M // W), M - rank * -(-M // W)))
        return [(name, bitwise_equal(impl(x, w), ref, n_valid, rank=rank)) for name, impl in impls.items()
                if not ((name == "asynctp_s" and M % W) or name in skip)]

    def all_passed(verdicts: list, where: str) -> bool:
        """Every rank's verdicts passed (agreed over ranks); the located mismatches printed otherwise."""
        ok = torch.tensor([int(all(v.passed for _, v in verdicts))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=ctrl)
        for name, v in verdicts:
            if not v.passed:
                print(f"[rank {rank}] {where} {name}: {v.render()}", flush=True)
        return bool(ok.item())

    def rotated(M: int, N: int, K: int):
        """(x, w, out-shard) and (x, w, full-out) triples over enough buffer sets that the working set
        exceeds 2x L2 (method 2)."""
        S = -(-M // W)
        nsets = max(2, min(args.reps, -(-2 * L2_BYTES // (2 * (M * K + N * K + S * N)))))
        xs = [torch.randn(M, K, device=dev).bfloat16() for _ in range(nsets)]
        ws = [(torch.randn(N, K, device=dev) / K**0.5).bfloat16() for _ in range(nsets)]
        outs = [torch.empty(S, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
        ys = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
        sets = [(xs[i % nsets], ws[i % nsets], outs[i % nsets]) for i in range(args.reps)]
        full = [(xs[i % nsets], ws[i % nsets], ys[i % nsets]) for i in range(args.reps)]
        return sets, full

    def rs_calls(impl, name: str, M: int, sets) -> list | None:
        """One graph's closures of a GEMM-RS implementation (async-TP: no out=, and None where W does not
        divide M)."""
        if name == "asynctp_s":
            return None if M % W else [lambda a=a, b=b, i=impl: i(a, b) for a, b, _ in sets]
        return [lambda a=a, b=b, c=c, i=impl: i(a, b, out=c) for a, b, c in sets]

    def time_rs(impl, name: str, M: int, sets) -> float | None:
        """Seconds per call of a GEMM-RS implementation, max over ranks, median."""
        calls = rs_calls(impl, name, M, sets)
        return None if calls is None else max_over_ranks(torch, dist, ctrl, timed_graph(calls))

    def time_interleaved(named_calls: dict) -> dict:
        """Seconds per call of each ``name -> calls`` (None: not timed), max over ranks, median, their replays
        interleaved (``_timing.interleaved_samples``; the same order on every rank, a barrier before each)."""
        timed = {name: calls for name, calls in named_calls.items() if calls is not None}
        samples = interleaved_samples(torch, timed, args.samples, before_each=lambda: dist.barrier(group=ctrl))
        return {name: max_over_ranks(torch, dist, ctrl, samples[name]) if name in samples else None
                for name in named_calls}

    entries, protocol_entries, every_row = [], [], []
    for N, K in shapes:
        impls = {
            "fused_s": FusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev, force_fused=forced),
            "push_s": FusedGemmRsPush(None, max_M=max_m, N=N, K=K, device=dev),
            "unfused_s": UnfusedGemmRs(None, max_M=max_m, N=N, K=K, device=dev),
        }
        if not args.no_asynctp and not shared:
            impls["asynctp_s"] = TorchAsyncTpGemmRs(None, max_M=max_m, N=N, K=K, device=dev)
        if f"{N}x{K}" in args.experiment_shapes.split(",") and not shared:
            for key, (_, options, _) in EXPERIMENTS.items():
                impls[key] = FusedGemmRsPush(None, max_M=max_m, N=N, K=K, device=dev, **options)
        unchecked = {k for k, (_, _, checked) in EXPERIMENTS.items() if not checked}
        core = FusedGemmRsPush(singles[rank], max_M=max_m, N=N, K=K, device=dev)
        rows = []
        for M in ms:
            row = {"M": M}
            # 1. correctness first: every timed implementation, exact inputs bitwise; Gaussian at the smallest M
            verdicts = check_exact(impls, M, N, K, skip=unchecked)
            if M == min(ms):
                xg, wg = make_x(M, rank, M, K, W, "gaussian").to(dev), make_w(M, rank, N, K, W, "gaussian").to(dev)
                truth = seeded_shard_truth(M, "gaussian", rank, M, N, K, W, device=dev)
                for name in ("fused_s", "push_s"):
                    verdicts.append((name, within_tolerance(impls[name](xg, wg), truth, rank=rank)))
            ok = all_passed(verdicts, f"N={N} K={K} M={M}")
            row["check"] = "ok" if ok else "FAIL"
            if not ok:
                rows.append(row)
                continue
            # 2. rotated buffers, graphs
            sets, full = rotated(M, N, K)
            if not shared:  # every column's replays interleaved: a clock drift lands on all of them
                named = {name: rs_calls(impl, name, M, sets) for name, impl in impls.items()}
                named["mm_s"] = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in full]
                row.update(time_interleaved(named))
                if nvlink_gbs:
                    row["tx_s"], row["bound_s"] = bound_seconds(row["mm_s"], M, N, W, nvlink_gbs)
            row["push_tiles"] = "{}x{}".format(*_tile(impls["push_s"], M))
            # 5. GEMM core vs torch.mm, rank 0 alone
            dist.barrier(group=ctrl)
            if rank == 0:
                flops = 2.0 * M * N * K
                core_calls = [lambda a=a, b=b, c=c, i=core: i(a, b, out=c) for a, b, c in full]
                mm_calls = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in full]
                t = interleaved_samples(torch, {"core": core_calls, "mm": mm_calls}, args.samples)
                t_core, t_mm = statistics.median(t["core"]), statistics.median(t["mm"])
                row["core_tflops"], row["mm_tflops"] = flops / t_core / 1e12, flops / t_mm / 1e12
                row["core_tiles"] = "{}x{}".format(*_tile(core, M))
            dist.barrier(group=ctrl)
            rows.append(row)
            if rank == 0:
                print(f"N={N} K={K} M={M} done: {row}", flush=True)
        every_row += rows
        for impl in list(impls.values()) + [core]:
            impl.close()
        if not shared:
            entries += crossovers(rows, N, K, W, machine, command)
            by_m = protocol_entry(rows, N, K, W, machine, command)
            protocol_entries += [by_m] if by_m else []
            if by_m:  # 4. auto over this run's table (the same on every rank: timings are max over ranks)
                auto = FusedGemmRsAuto(None, max_M=max_m, N=N, K=K, device=dev, protocol_by_m=by_m["by_m"])
                for row in rows:
                    if row["check"] != "ok":
                        continue
                    M = row["M"]
                    row["auto_protocol"] = auto.call_protocol(M)
                    if not all_passed(check_exact({"auto_s": auto}, M, N, K), f"N={N} K={K} M={M}"):
                        row["check"] = "FAIL"
                        continue
                    row["auto_s"] = time_rs(auto, "auto_s", M, rotated(M, N, K)[0])
                auto.close()
        if rank == 0:  # each shape's tables as soon as it is measured: a time limit keeps what was printed
            topo = "shared-gpu (W ranks on one GPU, gloo)" if shared else "multi-gpu (one GPU per rank, NCCL)"
            bw = f"{nvlink_gbs:.0f} GB/s per direction ({nvlink_src})" if nvlink_gbs else "n/a"
            title = (f"{torch.cuda.get_device_name(dev)}, W={W} {topo}, N={N}, K/rank={K}, NVLink {bw}, "
                     f"push order {impls['push_s'].push_order}")
            print("\n" + title)
            print(render_table(rows, shared))
            if any(r.get(k) for r in rows for k in EXPERIMENTS):
                print(f"where the push time goes (us), N={N} K={K}:")
                print(render_experiments(rows))
            if args.plot:
                path = args.plot if len(shapes) == 1 else args.plot.replace(".png", f"_{N}x{K}.png")
                why = plot(rows, shared, path, title)
                print(f"plot: {path}" if why is None else f"plot not written: {why}", flush=True)
    if rank == 0:
        for e in entries:
            print(f"crossover N={e['N']} K={e['K']} W={e['W']} {e['protocol']}: "
                  f"should_run from M >= {e['min_m'] if e['min_m'] is not None else 'never (unfused everywhere)'}")
        for e in protocol_entries:
            print(f"faster protocol N={e['N']} K={e['K']} W={e['W']}: "
                  + " ".join(f"{m}:{p}" for m, p in e["by_m"].items()))
        if args.write_crossover and entries:
            from kernel.fused.crossover import TABLE_PATH, write_entries

            write_entries(entries, protocols=protocol_entries)
            print(f"crossover table written: {TABLE_PATH}")
        elif args.write_crossover:
            print("crossover table NOT written: no cross-rank timings (shared-gpu, or every check failed)")
    dist.destroy_process_group()
    if rank == 0 and exit_status(every_row):
        print("bench_gemm_rs: a correctness check failed (those Ms not timed)", flush=True)
    return exit_status(every_row)


def _tile(impl, M) -> tuple[int, int]:
    c = impl.tile_configs(impl.call_protocol(M))[impl.tile_config_index(M)]
    return c.tile_m, c.tile_n


if __name__ == "__main__":
    sys.exit(main())
