"""The counter-wrap family (fuzz/families/wrap.py) and the fused wrapper's epoch arithmetic: a call counter
advanced to just before 2^31 and 2^32 calls, the calls across it verified; a counter that reuses epoch 0 fails
there, an implementation without a counter is skipped (never passed), a hook that does nothing fails."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.families import RankContext, run_case
from fuzz.families.wrap import WRAP_LEAD, advance_for, boundary, crossed
from fuzz.strategies import WRAP_PLAN, declared_counter_bits, wrap_cases
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import EpochStamped, EpochZeroReused


def test_the_advance_puts_the_boundary_at_the_next_call():
    for bits in (32, 64):
        for wrap in ("signed", "unsigned"):
            for now in (0, 5, 1000, (1 << bits) - 7):
                n = advance_for(now, bits, wrap)
                values = [(now + n + i) % (1 << bits) for i in range(3)]
                assert values[0] == (boundary(bits, wrap) - 1) % (1 << bits)
                assert crossed(values[:2], bits, wrap) and not crossed(values[1:], bits, wrap)
    assert boundary(32, "signed") == 1 << 31 and boundary(32, "unsigned") == 1 << 32
    with pytest.raises(ValueError):
        boundary(32, "both")
    assert not crossed([5, 6, 7], 32, "unsigned") and not crossed([(1 << 31) + 1, (1 << 31) + 2], 32, "signed")


def test_fixed_cases_cross_each_boundary_with_a_late_rank():
    cases = wrap_cases(4, "shared-gpu")
    assert [c.wrap for c in cases] == ["signed", "unsigned"] and all(c.family == "wrap" for c in cases)
    assert all(c.late_rank == 3 and c.delay_ms > 0 and len(c.ms) > WRAP_LEAD + 1 for c in cases)
    # on the GPU the call at the boundary is the first at its M (flag words no call has stored yet)
    for c in cases:
        assert c.ms[WRAP_LEAD] not in c.ms[:WRAP_LEAD]
    assert wrap_cases(1, "cpu")[0].late_rank is None and len(WRAP_PLAN["cpu"]) == 2
    assert declared_counter_bits("unfused") is None
    assert declared_counter_bits("mutants.catalogue:EpochStamped") == 32


@pytest.mark.parametrize("wrap", ["signed", "unsigned"])
def test_a_counter_kept_right_passes_across_the_wrap(wrap):
    case = next(c for c in wrap_cases(1, "cpu") if c.wrap == wrap)
    checks = run_on_one_cpu_rank(EpochStamped, case)
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]
    wrapped = [c for c in checks if c.name == "counter_wrapped"]
    assert len(wrapped) == 1 and wrapped[0].passed and "crossed 2^" in wrapped[0].detail
    assert [c for c in checks if c.name == "counter_advanced"][0].passed
    assert sum(c.name == "bitwise_equal" for c in checks) == 3  # the exact calls, the one at the wrap among them


def test_epoch_zero_reused_fails_at_the_unsigned_wrap_only():
    signed, unsigned = wrap_cases(1, "cpu")
    assert not failed_checks(run_on_one_cpu_rank(EpochZeroReused, signed))
    failed = failed_checks(run_on_one_cpu_rank(EpochZeroReused, unsigned))
    assert {c.name for c in failed} >= {"within_tolerance", "bitwise_equal"}
    assert all(c.extra.get("call") == f"wrap{WRAP_LEAD}" for c in failed if c.name == "bitwise_equal")


def test_no_counter_is_skipped_and_a_hook_that_does_nothing_fails():
    case = wrap_cases(1, "cpu")[1]
    skipped = run_on_one_cpu_rank(UnfusedGemmRs, case)
    assert len(skipped) == 1 and skipped[0].skipped and not skipped[0].passed
    assert "keeps no call counter" in skipped[0].detail

    class Idle(EpochStamped):
        def advance_call_counter(self, calls):
            return None

    failed = {c.name for c in failed_checks(run_on_one_cpu_rank(Idle, case))}
    assert failed == {"counter_advanced", "counter_wrapped"}

    class CountsSmallMOnly(EpochStamped):  # a path without the counter at M > 64 (the fused W = 1 GEMM's non-split)
        def _run(self, x, w, out, M):
            if M > 64:
                return UnfusedGemmRs._run(self, x, w, out, M)
            return super()._run(x, w, out, M)

    checks = run_on_one_cpu_rank(CountsSmallMOnly, case)  # ms [1, 64, 255, 129, 1]: the call at the wrap is M = 255
    wrapped = [c for c in checks if c.name == "counter_wrapped"]
    assert not failed_checks(checks) and wrapped[0].passed  # the last call (M = 1) counts: crossed
    late = dataclasses.replace(case, ms=[1, 64, 255, 129, 200])
    wrapped = [c for c in run_on_one_cpu_rank(CountsSmallMOnly, late) if c.name == "counter_wrapped"]
    assert wrapped[0].skipped and not wrapped[0].passed and "take paths without it" in wrapped[0].detail


def test_fused_epoch_words_move_along_the_cycle_and_zero_stays_never_stored():
    from kernel.fused.wrapper import _advanced_epochs

    u32 = [0, 1, 5, (1 << 31) - 1, (1 << 32) - 3, (1 << 32) - 1]
    words = torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in u32], dtype=torch.int32)

    def as_u32(t):
        return [int(v) & 0xFFFFFFFF for v in t]

    assert as_u32(_advanced_epochs(words, 2, keep_zero=True)) == [0, 3, 7, (1 << 31) + 1, (1 << 32) - 1, 2]
    # 0 as "no call yet" (epoch and done words): two calls later it is 2; past 2^32 - 1 comes 1, never 0
    assert as_u32(_advanced_epochs(words, 2, keep_zero=False))[0] == 2
    assert as_u32(_advanced_epochs(words, (1 << 32) - 1, keep_zero=True)) == u32  # a whole cycle
    assert 0 not in as_u32(_advanced_epochs(words, 3, keep_zero=False))


def test_the_wrap_case_runs_on_an_instance_of_its_own_and_leaves_the_pools_as_it_was():
    # the pool's long-lived instance of the shape serves the cases after this one: its counter is not advanced to the
    # wrap and it is not closed by the wrap case
    case = wrap_cases(1, "cpu")[1]
    ctx = RankContext(EpochStamped, rank=0, world_size=1, device=torch.device("cpu"))
    try:
        pool = ctx.impl(case)
        before = pool.call_counter()
        assert not failed_checks(run_case(ctx, case))
        assert ctx.impl(case) is pool and pool.call_counter() == before
        after = run_case(ctx, dataclasses.replace(case, family="compute", wrap=None))
        assert not failed_checks(after), [c.render() for c in failed_checks(after)]
    finally:
        ctx.close()
