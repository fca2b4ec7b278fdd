"""inputs_untouched (properties/result_contract.py, checked for every eager call by fuzz/families/calls.py): a call
that changes a bit of its x or w fails, naming the call and the input; an untouched call passes."""

from __future__ import annotations

import pytest
import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import InputRescaledInPlace
from properties import inputs_changed, inputs_untouched, watch_inputs


def _pair():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 16, generator=g).bfloat16(), torch.randn(4, 16, generator=g).bfloat16()


@pytest.mark.parametrize("which", ["x", "w", "both"])
def test_a_changed_bit_fails_and_names_the_call_and_the_input(which):
    x, w = _pair()
    clean = inputs_changed(x, w, watch_inputs(x, w))
    before = watch_inputs(x, w)
    if which in ("x", "both"):
        x.view(torch.int16)[3, 5] ^= 1  # one bit of one element
    if which in ("w", "both"):
        w[0, 0] = -w[0, 0]
    check = inputs_untouched([("call0 (M=8)", clean), ("call1 (M=8)", inputs_changed(x, w, before))], rank=1)
    assert not check.passed and check.n_wrong == 1 and check.extra["changed"] == ["call1 (M=8)"]
    named = {"x": "call1 (M=8): x", "w": "call1 (M=8): w", "both": "call1 (M=8): x and w"}[which]
    assert f"1 of 2 calls changed their inputs ({named})" in check.detail


def test_untouched_inputs_pass_nan_payloads_included():
    x, w = _pair()
    x[0, 0] = float("nan")
    check = inputs_untouched([("call0 (M=8)", inputs_changed(x, w, watch_inputs(x, w)))])
    assert check.passed and check.total == 1


CASE = Case("compute", seed=3, N=64, K=64, max_M=256, ms=[37, 129], kind="gaussian", repeat=1)


def test_every_eager_call_is_watched_and_an_input_rescaled_in_place_fails():
    ok = run_on_one_cpu_rank(UnfusedGemmRs, CASE)
    watched = [c for c in ok if c.name == "inputs_untouched"]
    assert len(watched) == 1 and watched[0].passed and watched[0].total >= 2, [c.detail for c in failed_checks(ok)]
    failed = failed_checks(run_on_one_cpu_rank(InputRescaledInPlace, CASE), "inputs_untouched")
    assert len(failed) == 1 and "calls changed their inputs" in failed[0].detail and ": x" in failed[0].detail


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_write_around_an_offset_view_fails_the_view_itself_unchanged(where):
    from fuzz.families.context import OFFSET_TAIL_ROWS, offset_view

    x0, w = _pair()
    x = offset_view(x0, 8, "cpu")  # a packed buffer: 8 elements before x, OFFSET_TAIL_ROWS rows after it
    before = watch_inputs(x, w)
    buf = x._base
    if where == "head":
        buf[3] = 0
    else:
        buf[8 + x.numel() + OFFSET_TAIL_ROWS * 16 - 1] = 0
    assert torch.equal(x, x0)
    check = inputs_untouched([("call0 (M=8)", inputs_changed(x, w, before))])
    assert not check.passed and "call0 (M=8): x" in check.detail and "buffers they and out are views of" in check.detail



def _writes(fn):
    from properties.rejection import OpsSeen

    seen = OpsSeen()
    with seen:
        fn()
    return seen.written


def test_caller_writes_names_every_write_into_the_callers_memory_but_outs_own_bytes():
    from fuzz.families.context import offset_view
    from properties import Guarded, caller_writes

    x0, w = _pair()
    x = offset_view(x0, 8, "cpu")
    guarded = Guarded(3, 16, device="cpu")
    out = guarded.payload
    scratch = torch.zeros(8, 16, dtype=torch.bfloat16)

    def fine():
        torch.mm(x, w.T, out=scratch[:, :4])
        out.copy_(scratch[:3])
        out.zero_()

    assert caller_writes(_writes(fine), x, w, out) == []

    def metadata_only():  # no byte of x or w written: views, in-place views, the allocator's bookkeeping
        x.t_()
        x.t_()
        w.detach_()
        w.as_strided_(w.shape, w.stride())

    assert caller_writes(_writes(metadata_only), x, w, out) == []
    # (record_stream needs CUDA: its schema marks its tensor written, which is why it is listed as metadata)
    from properties.rejection import METADATA_WRITES

    for name in METADATA_WRITES:
        schema = getattr(torch.ops.aten, name).default._schema
        assert any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments), name
    assert caller_writes(_writes(lambda: x.mul_(2).mul_(0.5)), x, w, out) == ["aten.mul_.Tensor into x"]
    tail = x._base[8 + x.numel():]  # the packed buffer's next tensor: x's neighbour, put back at once
    assert caller_writes(_writes(lambda: tail.copy_(tail.clone())), x, w, out) == ["aten.copy_.default into x"]
    assert caller_writes(_writes(lambda: w[0].zero_()), x, w, None) == ["aten.zero_.default into w"]
    around = guarded.regions()  # a red zone next to out, written and put back
    zone = next(iter(around.values()))[0]
    assert caller_writes(_writes(lambda: zone.copy_(zone.clone())), x, w, out) == [
        "aten.copy_.default into the buffer around out"]
    # x and out sliced from one buffer (valid: they do not overlap): out's bytes are the call's, x's are not
    buf = torch.zeros(8 + 3, 16, dtype=torch.bfloat16)
    x2, out2 = buf[:8], buf[8:]
    assert caller_writes(_writes(lambda: out2.fill_(1)), x2, w, out2) == []
    assert caller_writes(_writes(lambda: buf[7:9].fill_(1)), x2, w, out2) == ["aten.fill_.Scalar into x"]


def test_caller_writes_sees_a_one_element_write_and_a_write_through_out_equals():
    """A write of one element is a write (its byte span is one element long, not empty), and so is a write into the
    caller's memory through an op's ``out=`` argument (passed to the dispatcher as a keyword, not positionally)."""
    from properties import Guarded, caller_writes

    x, w = _pair()
    out = Guarded(3, 4).payload
    corner = x[7, 15]
    assert caller_writes(_writes(lambda: corner.fill_(corner.item())), x, w, out) == ["aten.fill_.Scalar into x"]
    assert caller_writes(_writes(lambda: torch.mul(w, 1, out=w)), x, w, out) == ["aten.mul.out into w"]
    scratch = torch.empty(8, 4, dtype=torch.bfloat16)
    assert caller_writes(_writes(lambda: torch.mm(x, w.T, out=scratch)), x, w, out) == []  # its own temporary


def test_a_write_put_back_before_the_call_returned_fails_inputs_untouched():
    x, w = _pair()
    clean = inputs_changed(x, w, watch_inputs(x, w))
    check = inputs_untouched([("call0 (M=8)", clean, []), ("call1 (M=8)", clean, ["aten.mul_.Tensor into x"])])
    assert not check.passed and check.n_wrong == 1 and check.extra["changed"] == ["call1 (M=8)"]
    assert "1 of 2 calls wrote into the caller's memory while they ran, put back or not (call1 (M=8): aten.mul_" \
        in check.detail
    assert inputs_untouched([("call0 (M=8)", clean, [])]).passed


def test_inputs_written_and_put_back_fail_where_the_end_state_alone_passes():
    # (XPaddedInPlaceRestored pads at W > 1 only: the kill matrix runs it at W = 2)
    from mutants.catalogue import InputScaledAndUnscaled

    case = Case("compute", seed=3, N=64, K=64, max_M=256, ms=[37], kind="gaussian", repeat=1, offset=8)
    checks = run_on_one_cpu_rank(InputScaledAndUnscaled, case)
    failed = failed_checks(checks)
    assert [c.name for c in failed] == ["inputs_untouched"], [c.render() for c in failed]
    assert "wrote into the caller's memory while they ran" in failed[0].detail
    assert "calls changed their inputs" not in failed[0].detail  # the bits were put back


def test_an_implementation_built_with_torch_compile_runs_its_compiled_code_while_its_ops_are_seen():
    """Every eager call runs inside ``OpsSeen``; a dispatch mode makes torch.compile fall back to eager unless the mode
    says it ignores compile internals -- then the gate would judge a path the implementation never takes. The
    compiled code runs (a backend that records its runs) and the ops it dispatches are still seen."""
    from properties.rejection import OpsSeen

    runs = []

    def backend(gm, example_inputs):
        def compiled(*args):
            runs.append("compiled")
            return gm.forward(*args)
        return compiled

    @torch.compile(backend=backend)
    def layer(x, w):
        return (x @ w.T).relu()

    x, w = _pair()
    layer(x, w)
    runs.clear()
    seen = OpsSeen()
    with seen:
        y = layer(x, w)
    assert runs == ["compiled"], runs
    assert "aten.mm" in seen.ops() and torch.equal(y, (x @ w.T).relu())


def test_a_captured_call_is_judged_by_the_writes_its_ops_recorded():
    """A captured call runs nothing until its graph replays (so no end state to compare), but the ops its capture
    dispatched are each replay's: one that writes x and puts it back fails ``inputs_untouched``, named as captured;
    a clean captured call passes beside eager ones. (The ledger's call with ``captured=True`` on the CPU: what the
    graph family runs inside a capture.)"""
    from fuzz.families.calls import CaseCalls
    from mutants.catalogue import InputScaledAndUnscaled

    x, w = _pair()
    clean = UnfusedGemmRs(None, max_M=8, N=4, K=16, device="cpu")
    for factory, ok in ((UnfusedGemmRs, True), (InputScaledAndUnscaled, False)):
        captured = factory(None, max_M=8, N=4, K=16, device="cpu")
        ledger = CaseCalls(0, 1)
        ledger.call(clean, x, w, tag="eager0")
        ledger.call(captured, x, w, out=torch.empty(8, 4, dtype=torch.bfloat16), tag="graph0_capture", captured=True)
        (check,) = [c for c in ledger.finish() if c.name == "inputs_untouched"]
        assert check.total == 2, check.detail
        if ok:
            assert check.passed and "1 captured calls' ops wrote none of the caller's memory" in check.detail
        else:
            assert not check.passed and check.extra["changed"] == ["graph0_capture (M=8) captured"], check.detail
            assert "graph0_capture (M=8) captured: aten.mul_" in check.detail
            assert "calls changed their inputs" not in check.detail
