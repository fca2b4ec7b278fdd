"""One rank of the fused GEMM-RS GPU check (not a pytest module): ``torchrun --nproc-per-node W rs_worker.py``.

Verification model, every rank, for each M of an alternating sequence on one long-lived instance (of the
protocol ``--protocol`` names; ``auto`` with a ``--by-m`` table alternates the two kernels on one workspace):
  1. valid rows == the reference bit for bit: ``bf16(sum_p fp32(torch.mm(x_p, w_p.T)))`` in rank order
     (every rank rebuilds all ranks' inputs from seeds, so the reference needs no collective); with
     exact-integer inputs also == the integer truth;
  2. padding rows of ``out=`` (and rows past the view) keep their sentinel bit for bit;
  3. guard regions after the partials and the flags are untouched;
  4. a repeated call gives identical bits; ``out=None`` works;
  5. a late rank (``torch.cuda._sleep``) changes nothing but time;
  6. a CUDA graph captured at one M and replayed with inputs changed in place and out poisoned matches
     the reference on every replay, and the next eager call too (device-side epochs);
  7. a rejected call (M > max_M) leaves ``state_tensors()`` bit-identical.
Ranks agree on the verdict with an all-reduce; rank 0 prints ``RESULT W=.. PASSED|FAILED``.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from kernel import CapacityError  # noqa: E402
from kernel.fused import FusedGemmRs  # noqa: E402

SENTINEL = -1232.0  # exactly representable in bf16


def inputs(seed, p, M, N, K, kind):
    g = torch.Generator().manual_seed(seed * 1000 + p)
    if kind == "exact":  # |partial| <= 8*4, |sum| <= 256: every partial and sum exact in bf16
        x = torch.zeros(M, K)
        x[:, :8] = torch.randint(-2, 3, (M, 8), generator=g).float()
        w = torch.zeros(N, K)
        w[:, :8] = torch.randint(-2, 3, (N, 8), generator=g).float()
    else:
        x = torch.randn(M, K, generator=g)
        w = torch.randn(N, K, generator=g) / K**0.5
    return x.bfloat16().cuda(), w.bfloat16().cuda()


def reference(seed, W, M, N, K, kind):
    acc = None
    exact = torch.zeros(M, N, dtype=torch.float64, device="cuda")
    for p in range(W):
        x, w = inputs(seed, p, M, N, K, kind)
        part = torch.mm(x, w.t()).float()
        acc = part if acc is None else acc + part
        if kind == "exact":
            exact += x.double() @ w.double().T
    return acc.bfloat16(), (exact if kind == "exact" else None)


class Checker:
    def __init__(self, rank, W):
        self.rank, self.W, self.failures, self.checks = rank, W, [], 0

    def check(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            print(f"[rank {self.rank}] FAIL {what}", flush=True)


def compare(ck, impl, seed, M, kind, *, late=False, out_none=False, tag=""):
    W, r, N, K = impl.world_size, impl.rank, impl.N, impl.K
    S = -(-M // W)
    n_valid = max(0, min(S, M - r * S))
    x, w = inputs(seed, r, M, N, K, kind)
    buf = torch.full((S + 3, N), SENTINEL, dtype=torch.bfloat16, device="cuda")
    out = None if out_none else buf[:S]
    if late:
        torch.cuda._sleep(int(50e-3 * 1.5e9))
    y = impl(x, w, out=out)
    torch.cuda.synchronize()
    ref, exact = reference(seed, W, M, N, K, kind)
    mine = ref[r * S : r * S + n_valid]
    bad = int((y[:n_valid].view(torch.int16) != mine.view(torch.int16)).sum())
    ck.check(bad == 0, f"{tag} M={M} {kind}: {bad} elements differ from the reference")
    if exact is not None:
        bad = int((y[:n_valid].double() != exact[r * S : r * S + n_valid]).sum())
        ck.check(bad == 0, f"{tag} M={M}: {bad} elements differ from the integer truth")
    if not out_none:
        ck.check(y.data_ptr() == buf.data_ptr(), f"{tag} M={M}: out= not returned")
        pad = buf[n_valid:]
        ck.check(bool((pad.float() == SENTINEL).all()), f"{tag} M={M}: padding / rows past out written")
    for name, (cur, exp) in impl.guard_regions().items():
        ck.check(torch.equal(cur, exp), f"{tag} M={M}: guard {name} changed")
    ck.check(impl.last_path == "fused", f"{tag} M={M}: last_path={impl.last_path}")
    return x, w, y.clone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--K", type=int, default=256)
    ap.add_argument("--max-M", type=int, default=8192)
    ap.add_argument("--ms", default="129,1000,7,8191,1,129,4096,1000")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hang-timeout", type=float, default=240)
    ap.add_argument("--protocol", default="pull", choices=("pull", "push", "auto"))
    ap.add_argument("--by-m", default=None, help="auto: the protocol table, e.g. 1:push,1000:pull,4096:push")
    ap.add_argument("--push-order", default=None, help="push: force a tile order (default: the wrapper's choice)")
    ap.add_argument("--expect-push-order", default=None, help="push: the order the instance must have chosen")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.hang_timeout, exit=True)
    dist.init_process_group("gloo")
    rank, W = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    ck = Checker(rank, W)
    t0 = time.perf_counter()
    options = {"protocol": args.protocol}
    if args.push_order:
        options["push_order"] = args.push_order
    if args.by_m:
        options["protocol_by_m"] = {int(m): p for m, p in (kv.split(":") for kv in args.by_m.split(","))}
    impl = FusedGemmRs(max_M=args.max_M, N=args.N, K=args.K, device=torch.device("cuda", 0), force_fused=True,
                       **options)
    t_build = time.perf_counter() - t0
    if args.expect_push_order:
        ck.check(impl.push_order == args.expect_push_order,
                 f"push order {impl.push_order}, expected {args.expect_push_order}")
    ms = [int(m) for m in args.ms.split(",")]
    t0 = time.perf_counter()
    for i, M in enumerate(ms):
        for kind in ("exact", "gaussian"):
            _, _, y = compare(ck, impl, 10 + i, M, kind, tag=f"call{i}")
            if args.quick:
                continue
            x, w = inputs(10 + i, rank, M, impl.N, impl.K, kind)
            y2 = impl(x, w)
            torch.cuda.synchronize()
            S = -(-M // W)
            n_valid = max(0, min(S, M - rank * S))
            ck.check(torch.equal(y2[:n_valid], y[:n_valid]), f"repeat M={M} {kind}: not bitwise repeatable")
    t_calls = time.perf_counter() - t0
    if not args.quick:
        compare(ck, impl, 50, 1000, "exact", out_none=True, tag="out_none")
        for late_rank in (0, W - 1):
            compare(ck, impl, 60 + late_rank, 1000, "gaussian", late=(rank == late_rank), tag=f"late{late_rank}")
        # rejected call: state bit-identical
        state = {k: v.clone() for k, v in impl.state_tensors().items()}
        try:
            too_big = torch.zeros(args.max_M + 1, impl.K, dtype=torch.bfloat16, device="cuda")
            impl(too_big, inputs(1, rank, 1, impl.N, impl.K, "exact")[1])
            ck.check(False, "M > max_M accepted")
        except CapacityError:
            pass
        torch.cuda.synchronize()
        for k, v in impl.state_tensors().items():
            ck.check(torch.equal(v, state[k]), f"rejected call changed state {k}")
        # graph capture + replays
        M = 1000
        S = -(-M // W)
        n_valid = max(0, min(S, M - rank * S))
        x, w = inputs(70, rank, M, impl.N, impl.K, "exact")
        out = torch.empty(S, impl.N, dtype=torch.bfloat16, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            impl(x, w, out=out)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            impl(x, w, out=out)
        for rep in range(4):
            kind = "exact" if rep % 2 else "gaussian"
            x2, w2 = inputs(80 + rep, rank, M, impl.N, impl.K, kind)
            x.copy_(x2)
            w.copy_(w2)
            out.fill_(SENTINEL)
            graph.replay()
            torch.cuda.synchronize()
            ref, _ = reference(80 + rep, W, M, impl.N, impl.K, kind)
            ok = torch.equal(out[:n_valid], ref[rank * S : rank * S + n_valid])
            ok = ok and bool((out[n_valid:].float() == SENTINEL).all())
            ck.check(ok, f"graph replay {rep} ({kind}) wrong")
        del graph
        compare(ck, impl, 90, 129, "exact", tag="eager_after_graph")
    impl.close()
    failed = torch.tensor([len(ck.failures)], dtype=torch.int64)
    dist.all_reduce(failed)
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        print(f"RESULT W={W} {'PASSED' if failed.item() == 0 else 'FAILED'}: {args.protocol} "
              f"{impl.push_order or ''}, {ck.checks} checks on rank 0, "
              f"{failed.item()} failures over all ranks; build {t_build:.1f}s, {len(ms)} Ms x 2 kinds "
              f"in {t_calls:.2f}s", flush=True)
    dist.destroy_process_group()
    return 0 if failed.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
