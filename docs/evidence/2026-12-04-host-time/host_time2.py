"""An eager W = 1 fused call's host time with the DSL's marshalling kept (CompiledKernel._invoke) and without it
(the DSL's __call__, as before), torch.mm's beside; where the rest goes (cProfile); results bitwise equal to
torch.mm across buffers, Ms and a captured graph."""
import cProfile
import pstats
import sys
import time

import torch

import kernel.fused.compile as comp
from kernel.checks import check_operands
from kernel.fused.wrapper import FusedGemmRs

dev = torch.device("cuda", 0)
N, K = 7168, 2048
impl = FusedGemmRs(max_M=8192, N=N, K=K, device=dev, force_fused=True)
kept = comp.CompiledKernel._invoke


def dsl_call(self, args):
    self.fn(*args)


def eager_us(fn, n=400):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


for M in (128, 512):
    x = torch.randn(M, K, device=dev).bfloat16()
    w = torch.randn(N, K, device=dev).bfloat16()
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    row = {}
    for _rep in range(3):
        for name, inv in (("kept", kept), ("dsl_call", dsl_call)):
            comp.CompiledKernel._invoke = inv
            row.setdefault(name, []).append(eager_us(lambda x=x, w=w, y=y: impl(x, w, out=y)))
        row.setdefault("torch.mm", []).append(eager_us(lambda x=x, w=w, y=y: torch.mm(x, w.T, out=y)))
    comp.CompiledKernel._invoke = kept
    print(f"M={M}: " + ", ".join(f"{k} {min(v):.1f} us (runs {', '.join(f'{u:.1f}' for u in v)})"
                                 for k, v in row.items()), flush=True)

n = 20000
def per_call(f):
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6
x = torch.randn(512, K, device=dev).bfloat16()
w = torch.randn(N, K, device=dev).bfloat16()
y = torch.empty(512, N, device=dev, dtype=torch.bfloat16)
print(f"current_stream(dev).cuda_stream {per_call(lambda: torch.cuda.current_stream(dev).cuda_stream):.2f} us; "
      f"torch._C._cuda_getCurrentRawStream {per_call(lambda: torch._C._cuda_getCurrentRawStream(0)):.2f} us; "
      f"check_operands "
      f"{per_call(lambda: check_operands(x, w, y, N=N, K=K, max_M=8192, world_size=1, device=dev)):.2f} us")

pr = cProfile.Profile()
pr.enable()
for _ in range(3000):
    impl(x, w, out=y)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(18)

# results: bitwise torch.mm over rotating buffers and Ms (the kept marshalling must follow every argument)
bad = 0
bufs = {M: [(torch.randn(M, K, device=dev).bfloat16(), torch.empty(M, N, device=dev, dtype=torch.bfloat16))
            for _ in range(3)] for M in (1, 64, 129, 512, 2048)}
ws = [torch.randn(N, K, device=dev).bfloat16() for _ in range(2)]
for rnd in range(4):
    for _M, pairs in bufs.items():
        for i, (xx, yy) in enumerate(pairs):
            ww = ws[(i + rnd) % 2]
            yy.fill_(float("nan"))
            impl(xx, ww, out=yy)
            bad += int(not torch.equal(yy, torch.mm(xx, ww.T)))
g = torch.cuda.CUDAGraph()
xx, yy = bufs[129][0]
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    impl(xx, ws[0], out=yy)
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    impl(xx, ws[0], out=yy)
for _ in range(3):
    xx.copy_(torch.randn_like(xx))
    yy.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    bad += int(not torch.equal(yy, torch.mm(xx, ws[0].T)))
print(f"bitwise vs torch.mm: {4 * 15 + 3} calls, {bad} differ; "
      f"kept marshallings {[len(k._marshalled) for k in comp._CACHE.values()]}")
