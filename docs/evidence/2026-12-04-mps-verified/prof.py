"""Which cuBLAS kernel torch.mm runs at the GEMM-core points below 1.0, and its device time beside ours (torch
profiler, 20 calls each after warm-up; kernel names carry cuBLAS's tile, cluster and schedule)."""
import torch
from torch.profiler import ProfilerActivity, profile

from kernel.fused.wrapper import FusedGemmRs

dev = torch.device("cuda", 0)
for M, N, K in [(512, 7168, 2048), (2048, 7168, 14336), (8192, 7168, 14336), (512, 8192, 2048), (8192, 8192, 2048)]:
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    impl = FusedGemmRs(max_M=M, N=N, K=K, device=dev, force_fused=True)
    out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    for _ in range(5):
        torch.mm(x, w.T, out=out)
        impl(x, w)
    torch.cuda.synchronize()
    for label, fn in (("torch.mm", lambda a=x, b=w, c=out: torch.mm(a, b.T, out=c)),
                      ("ours", lambda i=impl, a=x, b=w: i(a, b))):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        rows = [(e.key, e.device_time_total / max(e.count, 1), e.count) for e in prof.key_averages()
                if e.device_time_total > 0]
        rows.sort(key=lambda r: -r[1] * r[2])
        for name, us, n in rows[:2]:
            tf = 2 * M * N * K / (us * 1e-6) / 1e12
            print(f"M={M} N={N} K={K} {label:8s} {us:8.1f} us x{n:<3d} {tf:6.1f} TF/s  {name[:150]}", flush=True)
