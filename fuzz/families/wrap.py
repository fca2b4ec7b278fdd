"""The counter-wrap family: an implementation that keeps a call counter on the device (epochs its flags compare,
``call_counter_bits``) must stay right when the counter wraps -- after 2^31 calls (a signed comparison of epochs
turns) and after 2^32 (the counter returns to 0, the value every never-written flag word holds). A server making
a call every 30 us reaches 2^32 calls in 36 hours: no test could get there by calling.

On a fresh instance of the case's shape (closed at the end: the pool's long-lived instances keep their counters,
so no later case depends on this one), the calls of ``case.ms`` (inputs ``case.call_kinds()``; the late rank
sleeps before each, on its stream), each verified (properties 1-6 of the compute family, tags ``wrap<i>``).
Right before the call at index ``WRAP_LEAD`` the contract's ``advance_call_counter`` moves the counter to one
call before the boundary (``case.wrap``: "signed", 2^(bits-1); "unsigned", 2^bits), so that call is the one that
reaches it, whatever the calls before it counted (the fused kernel's W = 1 GEMM counts its split-K calls only);
the lead calls' flag words move along as if stored a call or two before, the words no call stored stay 0. From
the boundary on the calls are launched back to back and checked after one wait: a rank enters its next call
while a late peer still reads the last one's data (a done wait that passes early at the wrap shows).

Two checks of the family's own: ``counter_advanced`` (the advance took: a hook that does nothing would make every
value check here pass without reaching the wrap) and ``counter_wrapped`` (the calls crossed the boundary;
skipped, with the reason, where no call from the advance on moved the counter: paths without it). An
implementation that keeps no counter (``call_counter_bits`` None), or an instance without one (``call_counter()``
None: a path without flags), skips the family with the reason, never passes it."""

from __future__ import annotations

from properties import skipped
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, close_impl
from .verified import check_call, launch_call, verified_call

#: calls made before the one that crosses the boundary (they leave flag words of epochs before it)
WRAP_LEAD = 2
WRAPS = ("signed", "unsigned")


def boundary(bits: int, wrap: str) -> int:
    """The counter value the case crosses: 2^(bits-1) ("signed") or 2^bits ("unsigned": 0 again)."""
    if wrap not in WRAPS:
        raise ValueError(f"wrap must be one of {WRAPS}, got {wrap!r}")
    return 1 << (bits - 1 if wrap == "signed" else bits)


def advance_for(now: int, bits: int, wrap: str) -> int:
    """Calls to advance a counter at ``now`` so that the next call that counts reaches :func:`boundary`."""
    return (boundary(bits, wrap) - 1 - now) % (1 << bits)


def crossed(values: list[int], bits: int, wrap: str) -> bool:
    """Whether consecutive counter values (read after the advance and after each call) cross the boundary."""
    half, full = 1 << (bits - 1), 1 << bits
    for a, b in zip(values, values[1:]):
        if wrap == "unsigned" and b % full < a % full:
            return True
        if wrap == "signed" and a % full < half <= b % full:
            return True
    return False


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r = ctx.rank
    bits = getattr(impl, "call_counter_bits", None)
    if not bits:
        return [skipped("counter_wrapped", f"{type(impl).__name__} keeps no call counter the gate can advance "
                        "(call_counter_bits None: kernel/interface.py, CONTRACT.md 'Counters')", rank=r)]
    own = ctx.fresh_impl(case)
    try:
        if own.call_counter() is None:
            return [skipped("counter_wrapped", f"this instance (N={case.N}, K={case.K}, max_M={case.max_M}, "
                            f"W={ctx.world_size}) keeps no call counter (call_counter() is None)", rank=r)]
        checks: list[CheckResult] = []
        values: list[int] = []
        lead = min(WRAP_LEAD, len(case.ms) - 1)
        calls = list(zip(case.ms, case.call_kinds()))
        for i, (M, kind) in enumerate(calls[:lead]):
            call_checks, _, _ = verified_call(ctx, own, case, M, case.seed + i, tag=f"wrap{i}", late=True, kind=kind)
            checks += call_checks
        now = own.call_counter()
        advance = advance_for(now, bits, case.wrap)
        own.advance_call_counter(advance)
        values.append(own.call_counter())
        want = (now + advance) % (1 << bits)
        checks.append(CheckResult(
            "counter_advanced", values[-1] == want, rank=r, total=1, n_wrong=int(values[-1] != want),
            detail=f"counter {now} advanced by {advance} reads {values[-1]} (expected {want})",
            extra={"from": now, "advance": advance, "bits": bits, "wrap": case.wrap}))
        # back to back from the boundary on: a rank enters its next call while the late one still reads this one's
        # data (a done wait that passes early at the wrap overwrites it then); checked after one wait
        launched = [launch_call(ctx, own, case, M, case.seed + i, tag=f"wrap{i}", late=True, kind=kind)
                    for i, (M, kind) in enumerate(calls) if i >= lead]
        ctx.sync()
        values.append(own.call_counter())
        for call in launched:
            checks += check_call(ctx, own, case, call)[0]
        if len(set(values)) == 1:  # no call from the advance on used the counter: nothing ran at the wrap
            checks.append(skipped("counter_wrapped", f"no call from the advance on moved the counter ({values[0]}): "
                                  f"this instance's calls at M = {case.ms[lead:]} take paths without it (the "
                                  "fused W = 1 GEMM counts its split-K calls only)", rank=r))
            return checks
        ok = crossed(values, bits, case.wrap)
        checks.append(CheckResult(
            "counter_wrapped", ok, rank=r, total=1, n_wrong=int(not ok),
            detail=(f"from the advance on, the counter went {' -> '.join(map(str, values))}: "
                    + (f"crossed 2^{bits - 1 if case.wrap == 'signed' else bits}" if ok else
                       "never crossed the boundary, so no call here ran at the wrap")),
            extra={"values": values, "wrap": case.wrap, "bits": bits}))
        return checks
    finally:
        close_impl(own)
