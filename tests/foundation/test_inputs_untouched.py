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
    assert not check.passed and "call0 (M=8): x" in check.detail and "buffers they are views of" in check.detail

