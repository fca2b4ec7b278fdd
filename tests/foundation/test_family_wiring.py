"""What each check of the families compares with what (the 36th session's planted-bug audit of fuzz/families/): a
check pointed at the wrong tensor, call, instance or rank passes the correct implementation exactly as before, so
only a test that breaks the very thing the check is about -- the oracle, a fresh instance, the out= buffer before the
call -- sees it."""

from __future__ import annotations

import ctypes
import time
from types import SimpleNamespace

import pytest
import torch
from _in_process import CPU, failed_checks, run_on_one_cpu_rank

from fuzz.bad_calls import BAD_CALLS
from fuzz.case import Case
from fuzz.families import RankContext, bad_call, run_case
from fuzz.families.calls import CallRaised, CaseCalls, raised_by_call
from kernel.errors import CapacityError
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue
from properties.result import CheckResult

BASE = dict(seed=7, N=64, K=64, max_M=64)


def test_the_oracle_sanity_check_judges_the_oracle_not_the_implementation(monkeypatch):
    # an oracle off by one everywhere (a broken reference: a rank dropped, a wrong group); the implementation right
    reference = RankContext.reference
    monkeypatch.setattr(RankContext, "reference", lambda self, x, w: reference(self, x, w) + 1.0)
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5], kind="gaussian", repeat=1, **BASE))
    assert failed_checks(checks, "oracle_within_tolerance"), [c.render() for c in checks
                                                              if c.name == "oracle_within_tolerance"]
    assert not failed_checks(checks, "within_tolerance")  # the implementation's own result is still right


class _OffAfterAnotherM(UnfusedGemmRs):
    """A test implementation off by one unit in the last place on every call once the instance has served another M
    (alternation: state from a call at another M): right on any instance's calls at its first M."""

    name = "test-off-after-another-m"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self._ms = getattr(self, "_ms", set()) | {M}
        if len(self._ms) > 1:
            y[: self.valid_rows(M)].view(torch.int16).add_(1)
        return y


def test_each_result_is_compared_with_a_fresh_instances_first_call():
    # call1 (M = 7) follows calls at M = 5 on the long-lived instance: off; a fresh instance's first call is right
    # (the long-lived instance called again at M = 7 would be off the same way: compared with it, nothing shows)
    checks = run_on_one_cpu_rank(_OffAfterAnotherM, Case("compute", ms=[5, 7], kind="gaussian", repeat=1, **BASE))
    (fresh,) = [c for c in checks if c.name == "fresh_per_call"]
    assert not fresh.passed and not fresh.skipped, fresh.render()
    assert "call 1 of the sequence (M=7" in fresh.detail, fresh.detail


def test_the_late_rank_waits_every_drawn_delay_before_its_calls(monkeypatch):
    # the smallest drawn skew too (fuzz.strategies.DRAWN_DELAYS_MS): 5 ms before each verified and back-to-back call
    waited = []
    monkeypatch.setattr(RankContext, "delay", lambda self, ms: waited.append(ms))
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5, 7], repeat=1, late_rank=0, delay_ms=5,
                                                     burst=True, **BASE))
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]
    assert waited == [5] * 4, waited  # call0, call1, burst0, burst1
    on_time = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5], repeat=1, late_rank=0, delay_ms=0, **BASE))
    assert on_time and waited == [5] * 4


def test_the_instances_familys_back_to_back_calls_have_the_late_rank_wait_before_each(monkeypatch):
    # a forward pass's layers behind a late peer: the only calls of the family made with the late rank's delay
    waited = []
    monkeypatch.setattr(RankContext, "delay", lambda self, ms: waited.append(ms))
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("instances", ms=[5, 7, 3], shapes=[[32, 64, 64]], order=[0, 1, 0],
                                                     late_rank=0, delay_ms=5, repeat=1, **BASE))
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]
    bursts = [c.extra["call"] for c in checks if c.name == "path_taken" and ".burst" in c.extra["call"]]
    assert len(bursts) == 3 and waited == [5] * 3, (bursts, waited)


def test_the_bias_check_goes_by_each_calls_own_input_kind():
    # a case whose kind is exact but whose second call draws gaussian inputs: that call's shard is rounded, so its bias
    # is checked (a scale error is inside the tolerance and bitwise right on exact inputs: only this check sees it)
    case = Case("compute", ms=[5, 64], kind="exact", kinds=["exact", "gaussian"], repeat=1, **BASE)
    checks = run_on_one_cpu_rank(catalogue.ScaleError, case)
    bias = {c.extra["call"]: c for c in checks if c.name == "no_systematic_bias"}
    assert bias["call0"].skipped and "exact inputs" in bias["call0"].detail, bias["call0"].render()
    assert not bias["call1"].passed and not bias["call1"].skipped, bias["call1"].render()


class _ResultsFromTwoBuffers(UnfusedGemmRs):
    """A test implementation that hands out its results from two buffers in turn (without ``out=``): every result
    shares its storage with the one two calls before."""

    name = "test-results-from-two-buffers"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if out is not None:
            return y
        self._n = getattr(self, "_n", 0) + 1
        ring = self.__dict__.setdefault("_ring", [torch.empty_like(y), torch.empty_like(y)])
        return ring[self._n % 2][: y.shape[0]].copy_(y)


def test_a_result_is_fresh_against_every_result_the_caller_holds_not_only_the_last():
    # the repeats make the same call three times: the third result is the first one's storage, holding the same bits
    # (earlier_results_unchanged cannot see it); the one right before is another buffer
    checks = run_on_one_cpu_rank(_ResultsFromTwoBuffers, Case("compute", ms=[5], out="none", repeat=3, **BASE))
    fresh = {c.extra["call"]: c for c in checks if c.name == "fresh_result"}
    assert fresh["call0"].passed and fresh["call0.repeat1"].passed
    assert not fresh["call0.repeat2"].passed, fresh["call0.repeat2"].render()
    assert "call0 (M=5)" in fresh["call0.repeat2"].detail, fresh["call0.repeat2"].detail


class RowAfterOutWrittenAndPutBack(UnfusedGemmRs):
    """A test implementation that uses the row after ``out`` (the caller's next tensor in its buffer) as scratch and
    puts its bits back before it returns: the red zones read after the call find them intact."""

    name = "test-row-after-out-put-back"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if out is not None:
            start = out.storage_offset() + out.numel()
            after = out.new_empty(0).set_(out.untyped_storage(), start, (out.shape[1],))
            saved = after.clone()
            after.fill_(1.0)
            after.copy_(saved)
        return y


def test_a_write_around_out_put_back_before_the_call_returned_fails_inputs_untouched():
    checks = run_on_one_cpu_rank(RowAfterOutWrittenAndPutBack, Case("compute", ms=[5], repeat=1, **BASE))
    failed = failed_checks(checks)
    assert [c.name for c in failed] == ["inputs_untouched"], [c.render() for c in failed]
    assert "into the buffer around out" in failed[0].detail, failed[0].detail


class _PaddingRowOnes:
    """A minimal implementation seen as group rank 1 of 2 (the ledger is told so): a fresh (3, N) shard at M = 5 whose
    padding row (its third: global row 5) holds ones, its valid rows zeros."""

    main_path, N, device, last_path = "fake", 4, CPU, None

    def expected_path(self, x, w):
        return "fake", ""

    def state_tensors(self):
        return {}

    def __call__(self, x, w, out=None):
        self.last_path = "fake"
        y = torch.zeros(3, self.N, dtype=torch.bfloat16)
        y[2] = 1.0
        return y


def test_a_fresh_results_padding_is_reported_at_its_global_row():
    calls = CaseCalls(1, 2)
    x, w = torch.zeros(5, 8, dtype=torch.bfloat16), torch.zeros(4, 8, dtype=torch.bfloat16)
    calls.call(_PaddingRowOnes(), x, w, tag="call0")
    (pad,) = [c for c in calls.checks if c.name == "fresh_padding_zero"]
    assert not pad.passed and pad.worst_row == 5, pad.render()  # rank 1's rows start at S = 3: its padding row is 5


class _BadCallRoundsXFirst(UnfusedGemmRs):
    """A test implementation that rounds the caller's x in place (to its integer part) before it checks the call:
    every bad call it rejects has changed x."""

    name = "test-bad-call-rounds-x-first"

    def __call__(self, x, w, out=None):
        if isinstance(x, torch.Tensor) and x.device.type != "meta" and x.dtype.is_floating_point:
            x.trunc_()
        return super().__call__(x, w, out)


def test_a_bad_call_that_changed_x_is_not_rejected_cleanly():
    checks = run_on_one_cpu_rank(_BadCallRoundsXFirst, Case("bad_call", ms=[5], kind="gaussian", bad="w_dtype",
                                                            **BASE))
    (bad,) = [c for c in checks if c.name == "bad_call_rejected"]
    assert not bad.passed and "x" in bad.detail, bad.render()


@pytest.mark.parametrize("W", [2, 3])
def test_every_entry_every_rank_rejected_is_the_lone_bad_call_for_some_seed(W, monkeypatch):
    made = []
    monkeypatch.setattr(bad_call, "reject", lambda ctx, impl, entry, good, *, name, **kw: (
        made.append(entry.name), CheckResult(name=name, passed=True, rank=ctx.rank))[1])
    monkeypatch.setattr(bad_call, "verified_call", lambda *a, **kw: ([], None, None))
    clean = [CheckResult(name="bad_call_rejected", passed=True, extra={"bad": b, "M": 5}) for b in BAD_CALLS]
    group = SimpleNamespace(world_size=W, gather=lambda v: dict.fromkeys(range(W), v), barrier=lambda: None)
    for seed in range(len(BAD_CALLS) * W):
        for r in range(W):
            group.rank = r
            bad_call.rejected_alone(group, None, SimpleNamespace(seed=seed), clean, SimpleNamespace(M=5))
    assert set(made) == set(BAD_CALLS), sorted(set(BAD_CALLS) - set(made))


class _WritesThePoolsInstance(UnfusedGemmRs):
    """A test implementation whose instances' calls write into the first instance's workspace (one flag area kept by
    the first instance built: the pool's long-lived one, instance 0 of an instances case)."""

    name = "test-writes-the-pools-instance"
    first: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.first:
            self.first.append(self)

    def _run(self, x, w, out, M):
        if self.first[0] is not self:
            self.first[0]._ws[0, 0] = float(M)
        return super()._run(x, w, out, M)


def test_a_case_instances_call_that_writes_the_pools_instance_fails_other_instances_untouched():
    _WritesThePoolsInstance.first.clear()
    try:
        checks = run_on_one_cpu_rank(_WritesThePoolsInstance, Case("instances", ms=[5, 7], shapes=[[32, 64, 64]],
                                                                   order=[0, 1], repeat=1, **BASE))
    finally:
        _WritesThePoolsInstance.first.clear()
    failed = failed_checks(checks, "other_instances_untouched")
    assert failed and "instance 0" in failed[0].detail, [c.render() for c in checks
                                                         if c.name == "other_instances_untouched"]


class _StaleAfterAnotherInstanceCloses(UnfusedGemmRs):
    """A test implementation whose instances go wrong once any instance built after them is closed (a workspace
    registry that frees a block an older instance still points to); a new instance is right."""

    name = "test-stale-after-another-instance-closes"
    closes = [0]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._born = self.closes[0]

    def close(self):
        self.closes[0] += 1
        super().close()

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if self._born < self.closes[0]:
            y[: self.valid_rows(M)].add_(1.0)
        return y


def test_after_a_re_creation_the_pools_instance_is_called_again():
    checks = run_on_one_cpu_rank(_StaleAfterAnotherInstanceCloses, Case(
        "instances", ms=[5, 7], shapes=[[32, 64, 64]], order=[0, 1], recreate=[[48, 64, 64]], repeat=1, **BASE))
    failed = {c.extra["call"] for c in failed_checks(checks, "within_tolerance")}
    assert failed == {"instance 0.after_recreate0"}, failed


class _WaivesBatchInvarianceWrongInBigBatches(UnfusedGemmRs):
    """A test implementation that waives batch invariance (non-exact inputs may differ in their last bits between
    batches) and is wrong, by one, in every batch of 32 rows and more: a waiver that excuses rounding, not this."""

    name = "test-waives-batch-invariance"
    waived_clauses = {"batch_invariant": "a batch's tiles round differently on non-exact inputs"}

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if M >= 32:
            y[: self.valid_rows(M)].add_(1.0)
        return y


def test_a_batch_invariance_waiver_does_not_excuse_exact_inputs():
    checks = run_on_one_cpu_rank(_WaivesBatchInvarianceWrongInBigBatches,
                                 Case("compute", ms=[5], kind="exact", batch_m=40, repeat=1, **BASE))
    (inv,) = [c for c in checks if c.name == "batch_invariant"]
    assert not inv.passed and not inv.skipped, inv.render()
    gaussian = run_on_one_cpu_rank(_WaivesBatchInvarianceWrongInBigBatches,
                                   Case("compute", ms=[5], kind="gaussian", batch_m=40, repeat=1, **BASE))
    (waived,) = [c for c in gaussian if c.name == "batch_invariant"]
    assert waived.skipped and "waived by the implementation" in waived.detail, waived.render()


def test_a_case_under_an_engines_defaults_builds_its_own_instance_beside_the_pools():
    # the pool already holds an instance of the shape, built under the process's defaults; the engine's case must
    # build (and call) one of its own under its defaults -- flag words in the default dtype break only there
    ctx = RankContext(catalogue.FlagWordsInDefaultDtype, rank=0, world_size=1, device=CPU)
    try:
        plain = run_case(ctx, Case("compute", ms=[5], repeat=1, **BASE))
        engine = run_case(ctx, Case("compute", ms=[5], repeat=1, defaults="engine", **BASE))
        held = sorted(ctx.held_impls())
    finally:
        ctx.close()
    assert not failed_checks(plain), [c.render() for c in failed_checks(plain)]
    assert failed_checks(engine, "call_raised"), [c.render() for c in engine]
    assert len(held) == 2 and "built under engine defaults" in held[1], held


def test_an_error_raised_while_a_valid_calls_failure_was_handled_is_that_calls():
    # a CUDA-graph capture that ends after a raising call raises its own error on top of it (implicitly chained:
    # __context__, no __cause__): the call's failure (call_raised), not a harness error
    def capture_ending_on_a_failed_call():
        try:
            raise CallRaised("RuntimeError in call graph0_capture")
        except CallRaised:
            raise RuntimeError("operation failed due to a previous error during capture")  # noqa: B904

    with pytest.raises(RuntimeError) as info:
        capture_ending_on_a_failed_call()
    assert raised_by_call(info.value)
    assert not raised_by_call(RuntimeError("a harness error"))


def test_a_group_views_gather_asks_its_own_groups_ranks(monkeypatch):
    # world rank 2 of 4 as group rank 0 of the TP group [2, 3]: the answers of that group's two ranks, gathered on its
    # process group -- the world's four (another replica's among them) would be keyed as if they were group ranks
    import torch.distributed as dist

    asked = []

    def all_gather_object(out, answer, group=None):
        asked.append(group)
        out[:] = [f"{answer} of group rank {r}" for r in range(len(out))]

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    world = RankContext(UnfusedGemmRs, rank=2, world_size=4, device=CPU)
    handle = object()
    world._shared.groups[(2, 3)] = handle
    view = world.on_group([2, 3], 1)
    assert view.gather("yes") == {0: "yes of group rank 0", 1: "yes of group rank 1"}
    assert asked == [handle]


def test_a_rank_that_states_no_path_table_beside_a_peer_that_does_fails_the_agreement(monkeypatch):
    # None on this rank (no claim), a table on the peer: the two ranks launch different kernels for one call
    class Impl:
        def __init__(self, group, **kw):
            pass

        def path_table(self):
            return None

    monkeypatch.setattr(RankContext, "gather", lambda self, mine: {0: mine, 1: ((1, "pull 64x112"),)})
    ctx = RankContext(Impl, rank=0, world_size=2, device=CPU)
    ctx.begin_case()
    ctx.new_impl(64, 64, 64)
    (check,) = ctx.calls.checks
    assert check.name == "kernel_paths_agree_across_ranks" and not check.passed, check.render()


class _LastRowOffByOneUlp(UnfusedGemmRs):
    """A test implementation one unit in the last place off in the last valid row's first element."""

    name = "test-last-row-off-by-one-ulp"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        n_valid = self.valid_rows(M)
        y[n_valid - 1 : n_valid, :1].view(torch.int16).add_(1)
        return y


def test_the_differential_digest_of_a_call_covers_its_last_valid_row():
    # fuzz.differential compares implementations call by call through the digest the first value check carries
    case = Case("compute", ms=[5], kind="gaussian", repeat=1, **BASE)

    def digest_of_call0(factory):
        (first,) = [c for c in run_on_one_cpu_rank(factory, case)
                    if c.name == "within_tolerance" and c.extra.get("call") == "call0"]
        return first.extra["digest"]

    assert digest_of_call0(UnfusedGemmRs) == digest_of_call0(UnfusedGemmRs)
    assert digest_of_call0(_LastRowOffByOneUlp) != digest_of_call0(UnfusedGemmRs)



def test_the_red_zones_around_out_are_read_after_every_call_with_out():
    # (a kernel's stores are no torch ops: on a GPU the red zones are the only witness of a write past out)
    checks = run_on_one_cpu_rank(catalogue.RowPastEndOfOut, Case("compute", ms=[5], repeat=1, **BASE))
    guards = [c for c in checks if c.name == "guard_regions_untouched" and c.extra.get("call") == "call0"]
    assert guards and not guards[0].passed and "out" in guards[0].detail, [c.render() for c in guards]


class _GuardRegionsRaiseOnSecondRead(UnfusedGemmRs):
    """A test implementation whose ``guard_regions()`` raises the second time it is asked (its first call checked)."""

    name = "test-guard-regions-raise-on-second-read"

    def guard_regions(self):
        self._reads = getattr(self, "_reads", 0) + 1
        if self._reads == 2:
            raise RuntimeError("red zones not mapped yet")
        return super().guard_regions()


def test_a_method_raising_mid_family_keeps_the_per_call_checks_made_before_it():
    checks = run_on_one_cpu_rank(_GuardRegionsRaiseOnSecondRead, Case("compute", ms=[5, 7], repeat=1, **BASE))
    assert checks[-1].name == "call_raised" and "guard_regions" in checks[-1].detail, checks[-1].render()
    assert {(c.name, c.extra.get("call")) for c in checks} >= {("path_taken", "call0"), ("result_contract", "call0")}


def test_the_end_of_case_checks_name_the_rank_that_made_them():
    ctx = RankContext(_PaddingRowOnes, rank=1, world_size=2, device=CPU)
    calls = ctx.begin_case()
    ctx.call(_PaddingRowOnes(), torch.zeros(5, 8, dtype=torch.bfloat16), torch.zeros(4, 8, dtype=torch.bfloat16),
             tag="call0")
    ends = calls.finish()
    assert {c.name for c in ends} >= {"earlier_results_unchanged", "inputs_untouched"}
    assert {c.rank for c in calls.checks + ends} == {1}, [(c.name, c.rank) for c in calls.checks + ends]


def test_the_late_rank_really_waits_its_delay_on_a_cpu_rank():
    # the tests above stub RankContext.delay; the gate's cpu topology has no GPU stream to sleep on, so the
    # host sleeps: a late rank that arrives on time never tests a peer that must wait for it
    ctx = RankContext(UnfusedGemmRs, rank=0, world_size=1, device=CPU)
    start = time.monotonic()
    ctx.delay(40)
    assert time.monotonic() - start >= 0.04


def test_a_group_views_world_is_this_rank_at_its_world_rank():
    # world rank 3 of 4 is group rank 1 of the TP group [2, 3]; back on the world it is rank 3 again (its inputs, its
    # shard, its checks' rank), not group rank 1
    world = RankContext(UnfusedGemmRs, rank=3, world_size=4, device=CPU)
    world._shared.groups[(2, 3)] = object()
    view = world.on_group([2, 3], 1)
    assert (view.rank, view.world_size) == (1, 2)
    back = view.world()
    assert (back.rank, back.world_size, back.group, back.tp.members) == (3, 4, None, (0, 1, 2, 3))


class _OffByOne(UnfusedGemmRs):
    """A test implementation whose every valid element is one too large (far outside any tolerance)."""

    name = "test-off-by-one"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        y[: self.valid_rows(M)].add_(1.0)
        return y


def test_the_dispatch_familys_tolerance_check_judges_the_implementations_side():
    # gaussian inputs: dispatch_sides_agree compares shapes and padding only, the values are within_tolerance's (the
    # torch side against the truth would pass whatever the implementation returned)
    checks = run_on_one_cpu_rank(_OffByOne, Case("dispatch", ms=[5], kind="gaussian", repeat=1, **BASE))
    bad = failed_checks(checks, "within_tolerance")
    assert bad and {c.extra["call"] for c in bad} >= {"layer0"}, [c.render() for c in checks
                                                                   if c.name == "within_tolerance"]


def test_exact_inputs_on_the_torch_side_of_the_layer_still_compare_the_implementation_bit_for_bit():
    # unfused's should_run says no below M = 128: the layer takes the torch path at M = 5, and the implementation's
    # call made beside it (a call that ignores should_run is still correct) must give the torch path's bits
    checks = run_on_one_cpu_rank(_LastRowOffByOneUlp, Case("dispatch", ms=[5], kind="exact", repeat=1, **BASE))
    bad = failed_checks(checks, "dispatch_sides_agree")
    assert bad and {c.extra["side"] for c in bad} == {"torch"}, [c.render() for c in checks
                                                                  if c.name == "dispatch_sides_agree"]


class _WrongAfterARejection(UnfusedGemmRs):
    """A test implementation that rejects an M past max_M cleanly but is one too large on every call after that (a
    rejection that left a half-updated epoch or a workspace pointer moved)."""

    name = "test-wrong-after-a-rejection"

    def validate(self, x, w, out):
        try:
            return super().validate(x, w, out)
        except CapacityError:
            self.rejected = True
            raise

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if getattr(self, "rejected", False):
            y[: self.valid_rows(M)].add_(1.0)
        return y


def test_the_capacity_familys_call_after_the_rejection_is_verified():
    checks = run_on_one_cpu_rank(_WrongAfterARejection, Case("capacity", bad="over", ms=[5], repeat=1, **BASE))
    assert not failed_checks(checks, "capacity_rejected"), [c.render() for c in checks]
    bad = failed_checks(checks, "within_tolerance")
    assert {c.extra.get("call") for c in bad} == {"after_reject"}, [c.render() for c in checks]


def test_the_nonfinite_pattern_is_the_implementations_against_the_oracles():
    checks = run_on_one_cpu_rank(catalogue.NaNSwallowed, Case("compute", ms=[5], kind="nonfinite", repeat=1, **BASE))
    bad = failed_checks(checks, "nonfinite_pattern_matches")
    assert {c.extra.get("call") for c in bad} >= {"call0"}, [c.render() for c in checks
                                                            if c.name == "nonfinite_pattern_matches"]


class _RedZoneWrittenOnRejection(UnfusedGemmRs):
    """A test implementation that rejects an M past max_M with CapacityError, after a store into the row right after
    ``out`` (a kernel launched before the check: no torch op, as a GPU kernel's store is none)."""

    name = "test-red-zone-written-on-rejection"

    def validate(self, x, w, out):
        try:
            return super().validate(x, w, out)
        except CapacityError:
            if out is not None:
                size = out.element_size()
                ctypes.memset(out.data_ptr() + out.numel() * size, 0x7F, out.shape[1] * size)
            raise


def test_a_rejected_capacity_call_has_the_red_zones_around_out_compared():
    checks = run_on_one_cpu_rank(_RedZoneWrittenOnRejection, Case("capacity", bad="over", ms=[5], repeat=1, **BASE))
    (rejected,) = [c for c in checks if c.name == "capacity_rejected"]
    assert not rejected.passed and not rejected.skipped, rejected.render()


class _GemmBeforeTheCapacityCheck(UnfusedGemmRs):
    """A test implementation that runs its GEMM into a scratch buffer before checking M (on a GPU: a kernel queued
    past the workspace before the check raises), then rejects an M past max_M with CapacityError, nothing watched
    changed."""

    name = "test-gemm-before-the-capacity-check"

    def validate(self, x, w, out):
        torch.mm(x[:1], w.t())
        return super().validate(x, w, out)


def test_a_rejected_capacity_call_must_queue_no_work_before_it_raises():
    checks = run_on_one_cpu_rank(_GemmBeforeTheCapacityCheck, Case("capacity", bad="over", ms=[5], repeat=1, **BASE))
    (rejected,) = [c for c in checks if c.name == "capacity_rejected"]
    assert not rejected.passed and not rejected.skipped, rejected.render()
