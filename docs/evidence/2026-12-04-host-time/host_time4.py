"""The launch path after the stream argument's import left it: eager host time and bitwise results (W = 1)."""
import sys
import time

import torch

from kernel.fused.wrapper import FusedGemmRs

dev = torch.device("cuda", 0)
N, K = 7168, 2048
impl = FusedGemmRs(max_M=8192, N=N, K=K, device=dev, force_fused=True)


def eager_us(fn, n=400):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


bad = 0
for M in (128, 512, 2048):
    x = torch.randn(M, K, device=dev).bfloat16()
    w = torch.randn(N, K, device=dev).bfloat16()
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    ours = min(eager_us(lambda x=x, w=w, y=y: impl(x, w, out=y)) for _ in range(3))
    mm = min(eager_us(lambda x=x, w=w, y=y: torch.mm(x, w.T, out=y)) for _ in range(3))
    y.fill_(float("nan"))
    impl(x, w, out=y)
    bad += int(not torch.equal(y, torch.mm(x, w.T)))
    print(f"M={M}: ours {ours:.1f} us, torch.mm {mm:.1f} us", flush=True)
print(f"bitwise vs torch.mm: 3 calls, {bad} differ", flush=True)
sys.exit(1 if bad else 0)
