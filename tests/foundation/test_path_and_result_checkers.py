"""The per-call checkers of issue 13 (properties/path.py, properties/result_contract.py, call_raised): each
passes on a right result and FAILS on a planted wrong one, saying what is wrong."""

from __future__ import annotations

import torch

from kernel.interface import Eligibility
from properties import (
    call_raised,
    fresh_padding_zero,
    fresh_result,
    main_path_available,
    path_taken,
    result_contract,
    results_unchanged,
    returns_out,
    sentinel_like,
)

S, N = 4, 16
CPU = torch.device("cpu")


def _fails(res, *needles):
    assert not res.passed and not res.skipped, res.render()
    text = res.render()
    assert "FAILED" in text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    return res


def _passes(res):
    assert res.passed and not res.skipped, res.render()
    return res


# --- path_taken / main_path_available --------------------------------------------------------------


def test_path_taken_passes_on_the_main_path_and_on_a_declared_fallback_with_its_reason():
    main = _passes(path_taken("fused", "fused", ""))
    assert main.extra == {"path": "fused", "expected": "fused", "reason": ""}
    fallback = _passes(path_taken("unfused", "unfused", "W=3: the fused kernel supports W in (1, 2, 4, 8)"))
    assert fallback.extra["reason"].startswith("W=3") and "legitimate fallback" in fallback.detail


def test_path_taken_fails_a_silent_fallback():
    res = _fails(path_taken("unfused", "fused", ""), "ran path 'unfused'", "'fused'", "silent fallback")
    assert res.extra == {"path": "unfused", "expected": "fused", "reason": ""}


def test_path_taken_fails_a_call_that_reports_no_path():
    _fails(path_taken(None, "fused", ""), "did not report its path")


def test_path_taken_fails_where_no_path_serves_the_call():
    _fails(path_taken("fused", None, "K=100 is not a multiple of 64"), "no path serves this call", "K=100")


def test_path_taken_fails_a_main_path_call_that_ran_the_fallbacks_ops():
    res = _fails(path_taken("fused", "fused", "", main_path="fused", fallback_ops_ran=("aten.mm", "aten.mm")),
                 "reported the main path 'fused'", "dispatched aten.mm,", "only its fallback runs")
    assert res.extra["fallback_ops_ran"] == ["aten.mm", "aten.mm"]
    # no such op, or the fallback reported as such: the plain rules
    _passes(path_taken("fused", "fused", "", main_path="fused", fallback_ops_ran=()))
    _passes(path_taken("unfused", "unfused", "K=100", main_path="fused", fallback_ops_ran=("aten.mm",)))


def test_a_lying_fallback_fails_path_taken_only_through_its_declared_fallback_ops():
    from _in_process import failed_checks, run_on_one_cpu_rank

    from fuzz.case import Case
    from mutants.catalogue import LyingFallback

    class Undeclared(LyingFallback):
        fallback_ops = ()

    for M, lies in ((33, True), (200, False)):
        case = Case("compute", seed=5, N=64, K=64, max_M=256, ms=[M], kind="exact", out="guarded")
        failed = failed_checks(run_on_one_cpu_rank(LyingFallback, case))
        assert {c.name for c in failed} == ({"path_taken"} if lies else set()), [c.render() for c in failed]
        if lies:
            assert "aten.mm" in failed[0].detail and "'fast'" in failed[0].detail
        # without the declaration every check passes: values right, the report a lie nothing else can tell
        assert failed_checks(run_on_one_cpu_rank(Undeclared, case)) == []


def test_main_path_available_fails_with_the_hosts_reason():
    reason = "nvidia-cutlass-dsl (cutlass, cuda-python) is not importable"
    res = _fails(main_path_available(Eligibility(False, reason), main_path="fused"), reason, "'fused'")
    assert res.extra["reason"] == reason
    _passes(main_path_available(Eligibility(True), main_path="fused"))


# --- result_contract / returns_out ----------------------------------------------------------------------


def _good():
    return torch.zeros(S, N, dtype=torch.bfloat16)


def test_result_contract_passes_a_bf16_contiguous_shard():
    _passes(result_contract(_good(), shape=(S, N), device=CPU))


def test_result_contract_fails_each_broken_clause():
    _fails(result_contract(_good().float(), shape=(S, N), device=CPU), "dtype torch.float32")
    _fails(result_contract(_good()[: S - 1], shape=(S, N), device=CPU), f"shape ({S - 1}, {N})", f"({S}, {N})")
    _fails(result_contract(_good().to("meta"), shape=(S, N), device=CPU), "on meta")
    wide = torch.zeros(S, 2 * N, dtype=torch.bfloat16)[:, ::2]
    _fails(result_contract(wide, shape=(S, N), device=CPU), "not contiguous")
    _fails(result_contract(None, shape=(S, N), device=CPU), "NoneType, not a torch.Tensor")


def test_returns_out_passes_out_itself_and_fails_a_copy():
    out = _good()
    _passes(returns_out(out, out))
    _passes(returns_out(out.view(S, N), out))  # the same tensor seen through a view is out
    _fails(returns_out(out.clone(), out), "not the out= tensor")
    _fails(returns_out(out[:, : N // 2], out), "not the out= tensor")


def test_returns_out_fails_another_view_of_out_s_buffer():
    """``out`` itself: not a tensor of its buffer at another place (a payload shifted into a red zone, the same
    storage), nor ``out``'s memory read with other strides (a transpose of a square shard: same pointer and shape)."""
    from properties import Guarded

    g = Guarded(S, N)
    _passes(returns_out(g.payload, g.payload))
    shifted = g.buffer[g.front_words + N : g.front_words + N + S * N].view(S, N)  # one row on, into the back guard
    _fails(returns_out(shifted, g.payload), "not the out= tensor")
    square = torch.zeros(N, N, dtype=torch.bfloat16)
    _fails(returns_out(square.t(), square), "not the out= tensor", f"strides (1, {N})")


def test_result_contract_names_another_device_index():
    from properties.result_contract import _same_device

    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert not _same_device(cuda1, cuda0) and not _same_device(cuda0, cuda1)
    assert _same_device(cuda0, cuda0) and _same_device(torch.device("cuda"), cuda1)  # no index: the current one
    assert not _same_device(torch.device("cpu"), cuda0)


# --- fresh_result / fresh_padding_zero / results_unchanged ------------------------------------------


def test_fresh_result_passes_an_own_allocation():
    workspace = torch.zeros(8, N, dtype=torch.bfloat16)
    res = _passes(fresh_result(_good(), {"state tensor 'workspace'": workspace, "the result of call0": _good()}))
    assert res.total == 2


def test_fresh_result_fails_a_view_of_a_state_tensor_or_of_an_earlier_result():
    workspace = torch.zeros(8, N, dtype=torch.bfloat16)
    _fails(fresh_result(workspace[4:], {"state tensor 'workspace'": workspace}), "state tensor 'workspace'")
    earlier = torch.zeros(2 * S, N, dtype=torch.bfloat16)
    # a different view of the same storage: shared even though the element ranges do not overlap
    _fails(fresh_result(earlier[S:], {"the result of call0": earlier[:S]}), "the result of call0")


def test_fresh_padding_zero_passes_zero_padding_and_fails_anything_else():
    y = _good()
    y[:2] = 3.0
    _passes(fresh_padding_zero(y, 2))
    garbage = y.clone()
    garbage[3, 5] = 1.0
    res = _fails(fresh_padding_zero(garbage, 2, row_offset=10), "+0.0", "at index (3, 5)", "(global row 13)")
    assert res.n_wrong == 1
    negative_zero = y.clone()
    negative_zero[2, 0] = -0.0  # equal to 0 as a value, not bit for bit
    _fails(fresh_padding_zero(negative_zero, 2), "at index (2, 0)")
    _fails(fresh_padding_zero(sentinel_like((S, N)), 0), f"Mismatched elements: {S * N} / {S * N}")


def test_results_unchanged_locates_the_result_a_later_call_changed():
    a, b = _good(), torch.ones(S, N, dtype=torch.bfloat16)
    held = [("call0 (M=8)", a, a.clone()), ("call1 (M=7)", b, b.clone())]
    _passes(results_unchanged(held))
    b[1, 2] = 5.0
    res = _fails(results_unchanged(held), "1 of 2 results changed", "call1 (M=7)", "at index (1, 2)")
    assert res.extra["changed"] == ["call1 (M=7)"]


# --- call_raised ------------------------------------------------------------------------------------


def test_call_raised_carries_type_message_and_traceback():
    def kernel_launch():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    try:
        kernel_launch()
    except RuntimeError as exc:
        res = call_raised(exc, rank=1, what="valid call call0 (M=129)")
    _fails(res, "valid call call0 (M=129) raised RuntimeError", "illegal memory access", "in kernel_launch",
           "Traceback")
    assert res.extra["raised"] == "RuntimeError" and res.rank == 1
