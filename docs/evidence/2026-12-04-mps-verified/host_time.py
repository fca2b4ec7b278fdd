"""Host time of an eager fused W = 1 call (checks + launch, out= given, no wait for the GPU), with the launch
arguments' caches (this commit) and without them (each launch builds new DSL objects, as before); and the bare
JIT call with its arguments built once."""
import time

import torch

import kernel.fused.compile as cm
from kernel.fused.wrapper import FusedGemmRs

dev = torch.device("cuda", 0)


def per_call(fn, n=400):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def measure(M, N, K):
    impl = FusedGemmRs(max_M=M, N=N, K=K, device=dev, force_fused=True)
    x = torch.randn(M, K, device=dev).bfloat16()
    w = torch.randn(N, K, device=dev).bfloat16()
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    cached = per_call(lambda: impl(x, w, out=y))
    ptr, i32 = cm._ptr, cm._i32
    cm._ptr, cm._i32 = cm._new_ptr, cm._new_i32
    uncached = per_call(lambda: impl(x, w, out=y))
    cm._ptr, cm._i32 = ptr, i32
    ok = bool(torch.equal(impl(x, w, out=y), x @ w.T))
    compiled = impl._compiled[impl.kernel_protocols()[0]][impl.tile_config_index(M)]
    import cuda.bindings.driver as cuda
    stream = cuda.CUstream(torch.cuda.current_stream(dev).cuda_stream)
    args = cm._gemm_args(x.data_ptr(), w.data_ptr(), y.data_ptr(), M, N, K, stream)
    bare = per_call(lambda: compiled.fn(*args))
    print(f"M={M} N={N} K={K}: eager call {cached:.1f} us with the caches, {uncached:.1f} us without; "
          f"bare JIT call {bare:.1f} us; torch.mm eager {per_call(lambda: torch.mm(x, w.T, out=y)):.1f} us; "
          f"result bitwise torch.mm: {ok}", flush=True)


for M, N, K in [(128, 7168, 2048), (512, 7168, 2048)]:
    measure(M, N, K)
