"""Benchmark (not a test): the fused kernel's W == 1 GEMM vs torch.mm, BF16, one Hopper GPU.

For each (M, N, K): check correctness against an fp64 truth first (derived bound, as the tests), then
time both with CUDA graphs of ``REPS`` back-to-back calls, inputs rotated over enough buffer sets that
the working set exceeds L2, ``TRIALS`` replays of each graph, the two interleaved (``_timing.interleaved_samples``:
a clock drift lands on both sides). Prints TFLOP/s of both (medians), the ratio, and the quartiles of the
replay-by-replay ratios (``q1-q3``: how far one run can be trusted), plus the compile seconds per (N, K)
configuration. A shape whose check fails is not timed (``n/a``) and makes the exit status 1.

    python bench/bench_gemm.py [--ms 128,512,...] [--ns 4096,7168] [--ks 2048,4096] [--protocol pull|push]

``--protocol`` picks the tile configs (kernel/fused/tiles.py): both have 128x256, 128x224 and 64x128 tiles
(pull with a 4-deep epilogue ring, push with the deep one). The last column names the tile each M used.
``--all-tiles`` also times every config at every M, split-K configs at every P (the data the cost model of
kernel/fused/tiles.py is fitted to) and prints one table of TF/s, the chosen config marked with ``*``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import interleaved_samples, paired_ratios, spread  # noqa: E402

from kernel.fused import FusedGemmRs  # noqa: E402
from kernel.fused.compile import compile_stats  # noqa: E402

U_BF16, U_FP32 = 2.0**-8, 2.0**-24
L2_BYTES = 50 * 2**20
TRIALS = 25
REPS = 10


def check(impl, M, N, K, device="cuda") -> tuple[str, float]:
    """("ok" or "FAIL(n out of bound)", max |ours - torch.mm|): Gaussian inputs against the fp64 truth."""
    g = torch.Generator(device=device).manual_seed(M * 31 + N + K)
    x = torch.randn(M, K, device=device, generator=g).bfloat16()
    w = torch.randn(N, K, device=device, generator=g).bfloat16()
    y = impl(x, w)
    truth = x.double() @ w.double().T
    bound = 2 * (U_BF16 * truth.abs() + K * U_FP32 * (x.double().abs() @ w.double().abs().T))
    bad = int(((y.double() - truth).abs() > bound).sum())
    ref = torch.mm(x, w.t())
    same = float((y.float() - ref.float()).abs().max())
    return "ok" if bad == 0 else f"FAIL({bad} out of bound)", same


def bench_one(impl, M, N, K, dev) -> tuple[float, float, tuple[float, float, float]]:
    """TFLOP/s of ours and of torch.mm (medians), inputs rotated so that the working set exceeds L2, the two
    graphs' replays interleaved; and the quartiles of the replay-by-replay ratios ours / torch.mm (speed)."""
    set_bytes = 2 * (M * K + N * K + M * N)
    nsets = max(2, min(REPS, -(-2 * L2_BYTES // set_bytes)))
    xs = [torch.randn(M, K, device=dev).bfloat16() for _ in range(nsets)]
    ws = [torch.randn(N, K, device=dev).bfloat16() for _ in range(nsets)]
    ys = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
    sets = [(xs[i % nsets], ws[i % nsets], ys[i % nsets]) for i in range(REPS)]
    ours = [lambda a=a, b=b, c=c: impl(a, b, out=c) for a, b, c in sets]
    theirs = [lambda a=a, b=b, c=c: torch.mm(a, b.t(), out=c) for a, b, c in sets]
    t = interleaved_samples(torch, {"ours": ours, "mm": theirs}, TRIALS)
    flops = 2.0 * M * N * K
    quartiles = spread(paired_ratios(t["mm"], t["ours"]))
    return flops / statistics.median(t["ours"]) / 1e12, flops / statistics.median(t["mm"]) / 1e12, quartiles


def measure(impl, M, N, K, dev) -> tuple[str, float, tuple | None]:
    """(verdict, max |ours - torch.mm|, :func:`bench_one`'s timing): correctness first; a failed check is not timed
    (None)."""
    verdict, diff = check(impl, M, N, K, dev)
    return verdict, diff, (bench_one(impl, M, N, K, dev) if verdict == "ok" else None)


def row_line(M, N, K, verdict: str, diff: float, timing, tile: str) -> str:
    """One line of the table: the check, TF/s of ours and of torch.mm, their ratio (> 1: ours faster), the
    quartiles of the replay-by-replay ratios, the tile; n/a in place of the timing of a failed check."""
    if timing is None:
        times = f"{'n/a':>9} {'n/a':>9} {'n/a':>6} {'n/a':>9}"
    else:
        tf_o, tf_m, (q1, _, q3) = timing
        times = f"{tf_o:>9.1f} {tf_m:>9.1f} {tf_o / tf_m:>6.2f} {q1:>4.2f}-{q3:<4.2f}"
    return f"{M:>6} {N:>6} {K:>6} | {verdict:>6} {diff:>12.4g} | {times} | {tile}"


class _Forced:
    """``impl`` with its tile config forced to ``index`` (the W == 1 GEMM launch of that config), and for a
    split-K config its K parts to ``splits``."""

    def __init__(self, impl, index, splits=None):
        self.impl, self.index, self.splits = impl, index, splits

    def __call__(self, x, w, out):
        self.impl.launch_config(self.impl.kernel_protocols()[0], self.index, x, w, out, x.shape[0], self.splits)
        return out


def tile_columns(configs) -> list[tuple[str, int, int | None]]:
    """``(label, config index, forced K parts)`` of every column of ``--all-tiles``: each config, and each split-K
    config once per P of :data:`kernel.fused.config.SPLIT_K_CHOICES` (the data its constants are fitted to)."""
    from kernel.fused.config import SPLIT_K_CHOICES

    cols = []
    for i, c in enumerate(configs):
        name = c.label
        cols += [(f"{name}/{p}", i, p) for p in SPLIT_K_CHOICES] if c.split_k else [(name, i, None)]
    return cols


def all_tiles(impl, M, N, K, dev) -> list[float]:
    """TF/s of every column of :func:`tile_columns` at M (each checked against the fp64 bound first; NaN where
    a column cannot run: a split-K P the parts workspace or K do not take)."""
    out = []
    for _, index, splits in tile_columns(impl.tile_configs()):
        forced = _Forced(impl, index, splits)
        y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        try:
            forced(torch.zeros(M, K, device=dev, dtype=torch.bfloat16), torch.zeros(N, K, device=dev,
                                                                                     dtype=torch.bfloat16), y)
        except ValueError:
            out.append(float("nan"))
            continue
        verdict, _ = check(lambda x, w, f=forced: f(x, w, torch.empty(x.shape[0], N, device=dev,
                                                                         dtype=torch.bfloat16)), M, N, K)
        out.append(bench_one(forced, M, N, K, dev)[0] if verdict == "ok" else float("nan"))
    return out


def chosen_column(impl, M) -> int:
    """The column of :func:`tile_columns` a call with M rows runs."""
    from kernel.fused.tiles import pick_splits

    index = impl.tile_config_index(M)
    config = impl.tile_configs()[index]
    splits = pick_splits(config, M, impl.N, impl.K, 1) if config.split_k else None
    return [(i, p) for _, i, p in tile_columns(impl.tile_configs())].index((index, splits))


def render_all_tiles(configs, every) -> str:
    """One line per (M, N, K): TF/s of each column of :func:`tile_columns` (the chosen one starred) and of
    torch.mm."""
    names = [label for label, _, _ in tile_columns(configs)]
    head = f"{'M':>6} {'N':>6} {'K':>6} | " + " ".join(f"{n:>10}" for n in names) + f" | {'mm':>7}"
    lines = ["every tile config, split-K ones per P (TF/s; * = chosen by kernel/fused/tiles.py)", head,
             "-" * len(head)]
    for M, N, K, chosen, tfs, mm in every:
        cells = " ".join(f"{t:>9.1f}{'*' if i == chosen else ' '}" for i, t in enumerate(tfs))
        lines.append(f"{M:>6} {N:>6} {K:>6} | {cells} | {mm:>7.1f}")
    return "\n".join(lines)


def tile_name(impl, M) -> str:
    """The tile config a call with M rows uses, with its K parts where it is a split-K config."""
    from kernel.fused.tiles import pick_splits

    c = impl.tile_configs()[impl.tile_config_index(M)]
    return c.label + (f" splitK P={pick_splits(c, M, impl.N, impl.K, 1)}" if c.split_k else "")


def host_overhead_us(impl, M) -> float:
    """Wall time of one eager wrapper call, checks + launch, without waiting for the GPU."""
    x = torch.randn(M, impl.K, device="cuda").bfloat16()
    w = torch.randn(impl.N, impl.K, device="cuda").bfloat16()
    y = torch.empty(M, impl.N, device="cuda", dtype=torch.bfloat16)
    impl(x, w, out=y)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        impl(x, w, out=y)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / 200 * 1e6


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="128,512,1024,4096,8192")
    p.add_argument("--ns", default="4096,7168")
    p.add_argument("--ks", default="2048,4096")
    p.add_argument("--protocol", default="pull", choices=("pull", "push"), help="whose tile configs (W = 1)")
    p.add_argument("--all-tiles", action="store_true", help="also time every tile config at every M")
    args = p.parse_args()
    ms = [int(v) for v in args.ms.split(",")]
    ns = [int(v) for v in args.ns.split(",")]
    ks = [int(v) for v in args.ks.split(",")]
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    dev = torch.device("cuda", 0)
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, {args.protocol} tile configs")
    hdr = (
        f"{'M':>6} {'N':>6} {'K':>6} | {'check':>6} {'max|ours-mm|':>12} | "
        f"{'ours TF/s':>9} {'mm TF/s':>9} {'ratio':>6} {'q1-q3':>9} | tile"
    )
    print(hdr)
    print("-" * len(hdr))
    max_m = max(ms)
    every = []  # (M, N, K, chosen index, [TF/s per config], mm TF/s)
    failed = 0  # shapes whose check failed (not timed)
    for N in ns:
        for K in ks:
            impl = FusedGemmRs(max_M=max_m, N=N, K=K, device=dev, force_fused=True, protocol=args.protocol)
            if args.all_tiles:
                impl.reserve_every_split()
            for M in ms:
                verdict, diff, timing = measure(impl, M, N, K, dev)
                failed += timing is None
                print(row_line(M, N, K, verdict, diff, timing, tile_name(impl, M)), flush=True)
                if args.all_tiles and timing is not None:
                    every.append((M, N, K, chosen_column(impl, M), all_tiles(impl, M, N, K, dev), timing[1]))
    if every:
        print(render_all_tiles(impl.tile_configs(), every))
    print(f"\nhost time per eager call (launch only, M={ms[0]}): {host_overhead_us(impl, ms[0]):.1f} us")
    print("\ncompile seconds per configuration (one compile serves every N and K):")
    for (cfg, arch), v in compile_stats()["configs"].items():
        print(
            f"  tile={cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} stages={v['ab_stage']} "
            f"sms={cfg.sm_count} {arch}: {v['seconds']:.2f} s ({v['origin']})"
        )
    if failed:
        print(f"\nbench_gemm: {failed} shape(s) failed the correctness check (not timed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
