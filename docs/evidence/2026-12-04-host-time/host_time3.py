"""An eager W = 1 fused call's host time, step by step back to the 26th session's: now (marshalling kept, torch's
raw stream handle, operands' metadata read once) / without the kept marshalling / and with
torch.cuda.current_stream / and with the old operand checks; torch.mm beside. The raw handle equals the public
one on a side stream and under capture; results bitwise equal to torch.mm across buffers, Ms and a captured graph."""
import sys
import time

import torch

import kernel.fused.compile as comp
import kernel.fused.wrapper as wrapper
import kernel.interface as interface
from kernel.checks import (  # noqa: F401
    ALIGN_BYTES,
    DeviceError,
    DTypeError,
    LayoutError,
    ShapeError,
    check_m_in_range,
    overlaps,
    shard_rows,
)
from kernel.fused.wrapper import FusedGemmRs


def old_check_bf16_2d(name, t, device):
    if not isinstance(t, torch.Tensor):
        raise ShapeError(name)
    if t.dim() != 2:
        raise ShapeError(name)
    if t.dtype != torch.bfloat16:
        raise DTypeError(name)
    if t.device != device:
        raise DeviceError(name)
    if not t.is_contiguous():
        raise LayoutError(name)
    if t.numel() and t.data_ptr() % ALIGN_BYTES:
        raise LayoutError(name)


def old_check_operands(x, w, out, *, N, K, max_M, world_size, device):  # as at 8e42f10 (messages shortened)
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        old_check_bf16_2d("x", x, device)
    check_m_in_range(int(x.shape[0]), max_M)
    old_check_bf16_2d("x", x, device)
    old_check_bf16_2d("w", w, device)
    if tuple(w.shape) != (N, K):
        raise ShapeError("w")
    if x.shape[1] != K:
        raise ShapeError("x")
    M = int(x.shape[0])
    if out is not None:
        old_check_bf16_2d("out", out, device)
        S = shard_rows(M, world_size)
        if tuple(out.shape) != (S, N):
            raise ShapeError("out")
        if overlaps(out, x) or overlaps(out, w):
            raise LayoutError("out")
    return M


dev = torch.device("cuda", 0)
N, K = 7168, 2048
impl = FusedGemmRs(max_M=8192, N=N, K=K, device=dev, force_fused=True)
kept, raw, new_checks = comp.CompiledKernel._invoke, wrapper._RAW_STREAM, interface.check_operands


def dsl_call(self, args):
    self.fn(*args)


def setup(level):
    comp.CompiledKernel._invoke = kept if level < 1 else dsl_call
    wrapper._RAW_STREAM = raw if level < 2 else None
    interface.check_operands = new_checks if level < 3 else old_check_operands


def eager_us(fn, n=400):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


names = ["now", "-kept marshalling", "-raw stream", "-one-read checks (26th session)"]
for M in (128, 512):
    x = torch.randn(M, K, device=dev).bfloat16()
    w = torch.randn(N, K, device=dev).bfloat16()
    y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    row = {}
    for _rep in range(3):
        for level, name in enumerate(names):
            setup(level)
            row.setdefault(name, []).append(eager_us(lambda x=x, w=w, y=y: impl(x, w, out=y)))
        row.setdefault("torch.mm", []).append(eager_us(lambda x=x, w=w, y=y: torch.mm(x, w.T, out=y)))
    setup(0)
    print(f"M={M}: " + "; ".join(f"{k} {min(v):.1f} us ({', '.join(f'{u:.1f}' for u in v)})" for k, v in row.items()),
          flush=True)

s = torch.cuda.Stream()
same = [torch._C._cuda_getCurrentRawStream(0) == torch.cuda.current_stream(dev).cuda_stream]
with torch.cuda.stream(s):
    same.append(wrapper.current_stream_handle(dev) == s.cuda_stream == torch.cuda.current_stream(dev).cuda_stream)
g0 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g0):
    same.append(wrapper.current_stream_handle(dev) == torch.cuda.current_stream(dev).cuda_stream)
print(f"raw handle == torch.cuda.current_stream: {same}", flush=True)

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
print(f"bitwise vs torch.mm: 63 calls, {bad} differ", flush=True)
sys.exit(1 if bad or not all(same) else 0)
