"""What a rank does with one case (see :mod:`fuzz.case` for the families and their properties).

Every rank runs the same sequence of collectives (implementation calls, oracle calls) in the same order,
so a correct implementation never deadlocks here; a broken one that does is caught by the driver's
watchdog. Each rank returns its own :class:`~properties.CheckResult` list; the ranks then agree on the
verdict with an all-reduce on the gloo control group before reporting.
"""

from __future__ import annotations

import dataclasses
import time
import traceback

import torch

import kernel.errors as kerr
from kernel.checks import shard_rows, valid_rows
from oracle import make_w, make_x, reference_gemm_rs, seeded_shard_truth
from properties import (
    Guarded,
    bitwise_equal,
    fresh_per_call,
    guard_regions_untouched,
    nonfinite_pattern_matches,
    padded_rows_untouched,
    rejected_cleanly,
    repeatable,
    sentinel_like,
    skipped,
    within_tolerance,
)
from properties.result import CheckResult

from .case import BAD_CALLS, Case


class RankContext:
    """A rank's long-lived state: its group, device, and implementation instances keyed by shape, so
    cases that follow each other in one pool alternate M on the same instance (as in serving)."""

    def __init__(self, impl_factory, *, rank: int, world_size: int, device: torch.device, group=None,
                 topology: str = "cpu"):
        self.impl_factory = impl_factory
        self.rank, self.world_size, self.device, self.group = rank, world_size, device, group
        self.topology = topology
        self._impls: dict[tuple, object] = {}

    def impl(self, case: Case):
        key = (case.max_M, case.N, case.K)
        if key not in self._impls:
            self._impls[key] = self.fresh_impl(case)
        return self._impls[key]

    def fresh_impl(self, case: Case):
        return self.impl_factory(self.group, max_M=case.max_M, N=case.N, K=case.K, device=self.device)

    def close(self) -> None:
        for impl in self._impls.values():
            _close(impl)
        self._impls.clear()

    # inputs ---------------------------------------------------------------------------------
    def x(self, case: Case, seed: int, M: int, kind: str | None = None) -> torch.Tensor:
        return make_x(seed, self.rank, M, case.K, self.world_size, kind or case.kind).to(self.device)

    def w(self, case: Case, seed: int, kind: str | None = None) -> torch.Tensor:
        return make_w(seed, self.rank, case.N, case.K, self.world_size, kind or case.kind).to(self.device)

    def truth(self, case: Case, seed: int, M: int, kind: str | None = None):
        dev = self.device if self.device.type == "cuda" else "cpu"
        return seeded_shard_truth(seed, kind or case.kind, self.rank, M, case.N, case.K, self.world_size,
                                  device=dev)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """All ranks here (e.g. after a rejected call's before/after comparison, before anyone's next
        call writes into peers' flag areas)."""
        self.sync()
        if torch.distributed.is_initialized() and self.world_size > 1:
            torch.distributed.barrier(group=self.group)


def waiver(impl, clause: str) -> str | None:
    """The reason ``impl`` gives for not offering a contract clause (kernel.interface.CLAUSES), or None."""
    return getattr(impl, "waived_clauses", {}).get(clause)


def _close(impl) -> None:
    close = getattr(impl, "close", None)
    if close is not None:
        close()


def run_case(ctx: RankContext, case: Case) -> list[CheckResult]:
    """All checks of ``case`` on this rank. Exceptions become a failed 'exception' check."""
    try:
        impl = ctx.impl(case)
    except kerr.UnsupportedConfigError as exc:
        return [CheckResult("unsupported_config_rejected", passed=True, rank=ctx.rank,
                            detail=f"construction raised {type(exc).__name__}: {exc}",
                            extra={"unsupported": True})]
    runner = {"compute": _compute, "capacity": _capacity, "bad_call": _bad_call, "graph": _graph}.get(case.family)
    if runner is None:
        return [CheckResult("case_family", passed=False, rank=ctx.rank, detail=f"unknown family {case.family!r}")]
    waived = []
    reason = waiver(impl, "out_param")
    if reason and case.out == "guarded" and case.family in ("compute", "capacity", "graph"):
        # No out= to check: run the case with out=None and report the out= clauses as skipped.
        case = dataclasses.replace(case, out="none")
        waived = [skipped(name, f"waived by the implementation: {reason}", rank=ctx.rank)
                  for name in ("returns_out", "padded_rows_untouched")]
    return runner(ctx, impl, case) + waived


# --- compute ------------------------------------------------------------------------------------

def _call_checked(ctx: RankContext, impl, case: Case, M: int, seed: int, *, tag: str, late: bool,
                  kind: str | None = None):
    """One implementation call at M with the full per-call property set (inputs of ``kind``, default
    the case's). Returns (checks, output, (x, w, S, n_valid, row0))."""
    W, r = ctx.world_size, ctx.rank
    kind = kind or case.kind
    x, w = ctx.x(case, seed, M, kind), ctx.w(case, seed, kind)
    S, n_valid, row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
    guarded = None
    out = None
    if case.out == "guarded":
        guarded = Guarded(S, case.N, device=ctx.device)
        guarded.payload.copy_(sentinel_like((S, case.N), device=ctx.device))
        out = guarded.payload
    before = out.clone() if out is not None else None
    if late and case.late_rank == r and case.delay_ms > 0:
        _delay(ctx, case.delay_ms)
    y = impl(x, w, out=out)
    ctx.sync()
    ref = reference_gemm_rs(x, w, ctx.group)
    truth = ctx.truth(case, seed, M, kind)
    checks = [
        within_tolerance(y, truth, rank=r),
        within_tolerance(ref, truth, rank=r, name="oracle_within_tolerance"),
        nonfinite_pattern_matches(y, ref, n_valid, rank=r, row_offset=row0),
    ]
    if kind == "exact":
        checks.append(bitwise_equal(y, ref, n_valid, rank=r, row_offset=row0))
        exact_truth = truth.y[:n_valid].to(torch.bfloat16)
        checks.append(bitwise_equal(ref, exact_truth, n_valid, rank=r, row_offset=row0, name="oracle_exact"))
    if out is not None:
        same = y.data_ptr() == out.data_ptr() and tuple(y.shape) == tuple(out.shape)
        checks.append(CheckResult("returns_out", passed=same, rank=r,
                                  detail="" if same else "the returned tensor is not the out= tensor"))
        checks.append(padded_rows_untouched(out, before, n_valid, rank=r, row_offset=row0))
        regions = dict(guarded.regions())
        regions.update(impl.guard_regions())
        checks.append(guard_regions_untouched(regions, rank=r))
    else:
        checks.append(guard_regions_untouched(impl.guard_regions(), rank=r))
    checks[0].extra["digest"] = digest(y, n_valid)  # for differential runs across implementations
    for c in checks:
        c.extra.setdefault("call", tag)
        c.extra.setdefault("M", M)
        c.extra.setdefault("kind", kind)
    return checks, y.clone(), (x, w, S, n_valid, row0)


def digest(y: torch.Tensor, n_valid: int) -> str:
    """A 64-bit fingerprint of the bits of the valid rows, computed where the data is: two results with
    the same digest are (up to a 2^-64 accident) bitwise identical. Hex string, JSON-safe."""
    if n_valid == 0:
        return "empty"
    words = y[:n_valid].contiguous().view(torch.int16).reshape(-1).to(torch.int64) & 0xFFFF
    idx = torch.arange(words.numel(), device=words.device, dtype=torch.int64)
    mixed = (words + 0x10001) * ((idx * 0x9E3779B1 + 0x7F4A7C15) | 1)  # wraps mod 2^64: fine
    return f"{int(mixed.sum()) & (2**64 - 1):016x}-{words.numel()}"


def _delay(ctx: RankContext, delay_ms: int) -> None:
    if ctx.device.type == "cuda":
        torch.cuda._sleep(int(delay_ms * 1.5e6))  # ~1.5 GHz: cycles for delay_ms on the GPU stream
    else:
        time.sleep(delay_ms / 1000)


def _compute(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r = ctx.rank
    checks: list[CheckResult] = []
    sequence = []
    unaligned_waived = waiver(impl, "unaligned_m")
    for i, (M, kind) in enumerate(zip(case.ms, case.call_kinds())):
        seed = case.seed + i
        if unaligned_waived and M % ctx.world_size:
            checks.append(skipped("unaligned_m", f"M={M} is not a multiple of W={ctx.world_size}; waived by the "
                                  f"implementation: {unaligned_waived}", rank=r, per_example=True))
            continue
        call_checks, y, (x, w, S, n_valid, row0) = _call_checked(ctx, impl, case, M, seed, tag=f"call{i}",
                                                                 late=True, kind=kind)
        checks += call_checks
        if i == 0 and case.repeat > 1:
            outs = [y]
            for _ in range(case.repeat - 1):
                o = sentinel_like((S, case.N), device=ctx.device) if case.out == "guarded" else None
                outs.append(impl(x, w, out=o).clone())
            ctx.sync()
            checks.append(repeatable(outs, n_valid, rank=r, row_offset=row0))
        if len(case.ms) > 1:
            fresh = ctx.fresh_impl(case)
            try:
                o = sentinel_like((S, case.N), device=ctx.device) if case.out == "guarded" else None
                yf = fresh(x, w, out=o).clone()
                ctx.sync()
            finally:
                _close(fresh)
            sequence.append((M, y, yf, n_valid, row0))
        if i == 0:
            checks.append(_inputs_changed_in_place(ctx, impl, case, x, w, M, seed + INPLACE_SEED_OFFSET, kind))
    if sequence:
        checks.append(fresh_per_call(sequence, rank=r))
    return checks


INPLACE_SEED_OFFSET = 1_000_003  # inputs written in place: a seed no call of a case uses


def _inputs_changed_in_place(ctx: RankContext, impl, case: Case, x, w, M: int, seed: int, kind: str) -> CheckResult:
    """Property 9: the same x and w tensors (same data pointers, same shapes) get new values in place,
    then one more call; its result must follow the new values (an implementation that stages inputs or
    caches results keyed by pointer — host state a graph replay would not reproduce — fails)."""
    r, W = ctx.rank, ctx.world_size
    n_valid, row0 = valid_rows(M, W, r), r * shard_rows(M, W)
    x.copy_(ctx.x(case, seed, M, kind))
    w.copy_(ctx.w(case, seed, kind))
    out = sentinel_like((shard_rows(M, W), case.N), device=ctx.device) if case.out == "guarded" else None
    y = impl(x, w, out=out)
    ctx.sync()
    truth = ctx.truth(case, seed, M, kind)
    name = "inputs_changed_in_place"
    if kind == "exact":
        res = bitwise_equal(y, truth.y[:n_valid].to(torch.bfloat16), n_valid, rank=r, row_offset=row0, name=name)
    else:
        res = within_tolerance(y, truth, rank=r, name=name)
    if not res.passed:
        res.detail = (res.detail + "; " if res.detail else "") + (
            "after new values were written into the same x and w tensors, the result did not follow them")
    res.extra.update(call="inplace", M=M, kind=kind)
    return res


# --- capacity ------------------------------------------------------------------------------------

def _capacity(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    reason = waiver(impl, "capacity_check")
    if reason:
        return [skipped("capacity_rejected", f"waived by the implementation: {reason}", rank=r)]
    w = ctx.w(case, case.seed)
    if case.bad == "zero":
        x = torch.empty(0, case.K, dtype=torch.bfloat16, device=ctx.device)
    elif case.bad == "over":
        x = ctx.x(case, case.seed, aligned_if_waived(impl, case.max_M + 1, W))
    elif case.bad == "huge":
        x = torch.zeros(1, case.K, dtype=torch.bfloat16, device=ctx.device).expand(1 << 40, case.K)
    else:
        return [CheckResult("case_family", passed=False, rank=r, detail=f"unknown capacity case {case.bad!r}")]
    guarded = Guarded(shard_rows(case.max_M, W), case.N, device=ctx.device)
    guarded.payload.copy_(sentinel_like(guarded.payload.shape, device=ctx.device))
    watched = {"out (with guards)": guarded.buffer, "w": w, **impl.state_tensors()}
    if case.bad != "huge":
        watched["x"] = x
    checks = [rejected_cleanly(lambda: impl(x, w, out=guarded.payload), kerr.CapacityError, watched, rank=r,
                               name="capacity_rejected")]
    checks[0].extra["bad"] = case.bad
    ctx.barrier()  # nobody's next call may touch a peer's state before that peer compared it
    # The instance still works after a rejected call.
    M_after = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    call_checks, _, _ = _call_checked(ctx, impl, case, M_after, case.seed + 1, tag="after_reject", late=False)
    return checks + call_checks


# --- bad calls -----------------------------------------------------------------------------------

def _bad_call(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    if case.bad == "all":
        return [_one_bad_call(ctx, impl, case, kind) for kind in sorted(BAD_CALLS)]
    if case.bad not in BAD_CALLS:
        return [CheckResult("case_family", passed=False, rank=ctx.rank, detail=f"unknown bad call {case.bad!r}")]
    return [_one_bad_call(ctx, impl, case, case.bad)]


#: bad calls whose operands hold the same values as a good call's (only the layout differs): an
#: implementation that accepts one is a contract violation either way, but a wrong result is worse
SAME_VALUES = ("x_noncontiguous", "x_misaligned")


def _judge_accepted(ctx: RankContext, case: Case, M: int, y, res: CheckResult) -> None:
    """A bad call that was accepted: say whether its result is right (the layout merely works) or wrong
    (silent corruption), in the failure's detail and ``extra["accepted_result_correct"]``."""
    try:
        verdict = within_tolerance(y, ctx.truth(case, case.seed, M), rank=ctx.rank)
        ok, why = verdict.passed, verdict.detail
    except Exception as exc:  # noqa: BLE001 — a result of the wrong shape/type is itself the answer
        ok, why = False, f"{type(exc).__name__}: {exc}"
    res.extra["accepted_result_correct"] = ok
    res.detail += ("; its result is right (the layout works; the contract still says reject)" if ok
                   else f"; its result is WRONG (silent corruption): {why}")


def aligned_if_waived(impl, M: int, W: int, max_M: int | None = None) -> int:
    """M itself, or (for an implementation that waives unaligned M) the next multiple of W — the one below
    where that would pass ``max_M``: a bad call, a capacity case or a graph must be tested at an M the
    implementation takes, so a rejection is for what the case tests."""
    if not waiver(impl, "unaligned_m") or M % W == 0:
        return M
    up = M + (-M) % W
    return up if max_M is None or up <= max_M else M - M % W


def _one_bad_call(ctx: RankContext, impl, case: Case, kind: str) -> CheckResult:
    r, W, dev = ctx.rank, ctx.world_size, ctx.device
    M = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    x, w = ctx.x(case, case.seed, M), ctx.w(case, case.seed)
    S = shard_rows(M, W)
    out = sentinel_like((S, case.N), device=dev)
    expected: type | tuple = getattr(kerr, BAD_CALLS[kind])
    out_waived = waiver(impl, "out_param")
    if out_waived and kind.startswith("out_"):
        return skipped("bad_call_rejected", f"{kind}: waived by the implementation: {out_waived}", rank=r)
    if out_waived:
        out = None
    args = {"x": x, "w": w, "out": out}
    if kind == "x_dtype":
        args["x"] = x.half()
    elif kind == "w_dtype":
        args["w"] = w.float()
    elif kind == "out_dtype":
        args["out"] = torch.zeros(S, case.N, dtype=torch.float32, device=dev)
    elif kind == "x_1d":
        args["x"] = x.reshape(-1)
    elif kind == "w_shape":
        args["w"] = torch.zeros(case.N + 8, case.K, dtype=torch.bfloat16, device=dev)
    elif kind == "k_mismatch":
        args["x"] = torch.zeros(M, case.K + 64, dtype=torch.bfloat16, device=dev)
    elif kind == "out_shape":
        args["out"] = sentinel_like((S + 1, case.N), device=dev)
    elif kind == "x_noncontiguous":
        buf = torch.zeros(M, 2 * case.K, dtype=torch.bfloat16, device=dev)
        buf[:, ::2] = x
        args["x"] = buf[:, ::2]  # strides (2K, 2): non-contiguous for every M
    elif kind == "x_misaligned":
        buf = torch.zeros(M * case.K + 1, dtype=torch.bfloat16, device=dev)
        args["x"] = buf[1:].view(M, case.K)
        args["x"].copy_(x)
    elif kind == "w_transposed":
        args["w"] = w.t()
        expected = (kerr.ShapeError, kerr.LayoutError)
    elif kind == "x_device":
        args["x"] = x.to("meta") if dev.type == "cpu" else x.cpu()
    if waiver(impl, "typed_errors"):
        expected = Exception  # any clear error will do; accepting the call or changing state still fails
    watched = {"w": w, **impl.state_tensors()}
    if args["out"] is not None:
        watched["out"] = args["out"]
    if args["x"].device.type != "meta":
        watched["x"] = args["x"]
    accepted: dict = {}

    def call():
        accepted["y"] = impl(args["x"], args["w"], out=args["out"])

    res = rejected_cleanly(call, expected, watched, rank=r, name="bad_call_rejected")
    res.extra["bad"] = kind
    res.extra["M"] = M
    if "y" in accepted and kind in SAME_VALUES:
        _judge_accepted(ctx, case, M, accepted["y"], res)
    if not res.passed:
        res.detail = f"bad call {kind}: {res.detail}"
    return res


# --- graphs --------------------------------------------------------------------------------------

def _graph(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    if ctx.device.type != "cuda":
        return [skipped("graph_replay", f"topology {ctx.topology} has no CUDA graphs", rank=r)]
    waived = waiver(impl, "graph_capture")
    if waived:
        return [skipped("graph_replay", f"waived by the implementation: {waived}", rank=r)]
    M = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    notes: list[CheckResult] = []
    if M != case.ms[0]:
        notes.append(skipped("unaligned_m", f"graph at M={M} instead of M={case.ms[0]}: waived by the "
                             f"implementation: {waiver(impl, 'unaligned_m')}", rank=r, per_example=True))
    out_waived = waiver(impl, "out_param")
    S, n_valid, row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
    x, w = ctx.x(case, case.seed, M), ctx.w(case, case.seed)
    # With out= waived the graph's own output (allocated at capture, rewritten by every replay) is checked.
    out = None if out_waived else sentinel_like((S, case.N), device=ctx.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        impl(x, w, out=out)  # warm-up (compile, workspaces) outside capture
    torch.cuda.current_stream().wait_stream(side)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = impl(x, w, out=out)
    if out is None:
        out = y
    checks: list[CheckResult] = notes
    for i in range(max(1, case.repeat)):
        seed = case.seed + 1 + i
        x.copy_(ctx.x(case, seed, M))
        w.copy_(ctx.w(case, seed))
        out.copy_(sentinel_like(out.shape, device=ctx.device))
        before = out.clone()
        graph.replay()
        ctx.sync()
        truth = ctx.truth(case, seed, M)
        ref = reference_gemm_rs(x, w, ctx.group)
        for c in (within_tolerance(out, truth, rank=r, name="graph_replay"),
                  padded_rows_untouched(out, before, n_valid, rank=r, row_offset=row0, name="graph_replay_padding")):
            c.extra["replay"] = i
            checks.append(c)
        if case.kind == "exact":
            checks.append(bitwise_equal(out, ref, n_valid, rank=r, row_offset=row0, name="graph_replay_exact"))
    del graph
    after, _, _ = _call_checked(ctx, impl, case, M, case.seed + 99, tag="eager_after_graph", late=False)
    return checks + after


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
