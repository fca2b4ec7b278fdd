"""A call without out= (fresh result: 3cd54b2 fills only padding rows) vs the old fresh result (a zeroed shard, then the
call into it) vs a caller's out=: W = 1 fused GEMM, CUDA graphs of 10 calls, median of 25 replays, us per call."""
import statistics
import sys

import torch

sys.path.insert(0, ".kwt")
from _timing import graph_samples  # noqa: E402

from kernel.fused.wrapper import FusedGemmRs  # noqa: E402

dev = torch.device("cuda", 0)
print(f"{'M':>6} {'N':>6} {'K':>6} | {'fresh (new)':>11} {'zeros+out (old)':>15} {'out=':>8} | saved")
for M, N, K in [(512, 7168, 2048), (2048, 7168, 2048), (8192, 7168, 2048), (8192, 8192, 2048), (8192, 7168, 14336)]:
    impl = FusedGemmRs(max_M=M, N=N, K=K, device=dev, force_fused=True)
    x = torch.randn(M, K, device=dev).bfloat16()
    w = torch.randn(N, K, device=dev).bfloat16()
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    got = impl(x, w)
    ok = bool(torch.equal(got, impl(x, w, out=y))) and bool(torch.equal(got, x @ w.T))  # bitwise, as bench_gemm's
    t = {}
    t["new"] = statistics.median(graph_samples(torch, [lambda i=impl, a=x, b=w: i(a, b)] * 10, 25))
    old = [lambda i=impl, a=x, b=w, m=M, n=N: i(a, b, out=torch.zeros(m, n, device=dev, dtype=torch.bfloat16))]
    t["old"] = statistics.median(graph_samples(torch, old * 10, 25))
    t["out"] = statistics.median(graph_samples(torch, [lambda i=impl, a=x, b=w, c=y: i(a, b, out=c)] * 10, 25))
    print(f"{M:>6} {N:>6} {K:>6} | {t['new'] * 1e6:>11.1f} {t['old'] * 1e6:>15.1f} {t['out'] * 1e6:>8.1f} | "
          f"{(t['old'] - t['new']) * 1e6:6.1f} us ({100 * (t['old'] - t['new']) / t['old']:.1f} %)"
          f"{'' if ok else '  RESULT MISMATCH'}", flush=True)
