"""Autograd modes (``Case.autograd = "rotate"``, fuzz/families/calls.py): a compute case's eager calls run under
``torch.inference_mode()``, ``torch.no_grad()`` and grad enabled in turn, the first in inference mode (a server's
warm-up). The correct implementation passes in every mode; a workspace allocated lazily at the first call -- an
inference tensor after an inference-mode warm-up -- raises at the next call outside that mode, and only the rotation
finds it."""

from __future__ import annotations

import pytest
import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from fuzz.families.calls import AUTOGRAD_MODES, CaseCalls
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue

BASE = dict(seed=7, N=64, K=64, max_M=512)


def test_the_correct_implementation_passes_in_every_mode_and_each_call_names_its_mode():
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[3, 100, 3], autograd="rotate", **BASE))
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]
    tags = [c.extra["call"] for c in checks if c.name == "path_taken"]
    modes = [t[t.index("[") + 1: t.index("]")] for t in tags]
    assert modes[:4] == ["inference_mode", "no_grad", "grad", "inference_mode"], tags
    assert set(modes) == set(AUTOGRAD_MODES)


def _caught_by_the_rotation_only(mutant) -> None:
    """``mutant`` raises at its first call outside inference mode ("[no_grad]", the rotation's second) in a rotating
    case, and passes a case made in the caller's own mode."""
    rotated = run_on_one_cpu_rank(mutant, Case("compute", ms=[3, 100], autograd="rotate", **BASE))
    bad = failed_checks(rotated, "call_raised")
    assert bad and "inference tensor" in bad[0].detail and "[no_grad]" in bad[0].detail, [c.render() for c in rotated]
    plain = run_on_one_cpu_rank(mutant, Case("compute", ms=[3, 100], **BASE))
    assert not failed_checks(plain), [c.render() for c in failed_checks(plain)]


def test_a_workspace_made_at_the_first_call_is_caught_by_the_rotation_only():
    _caught_by_the_rotation_only(catalogue.WorkspaceAllocatedAtFirstCall)


def test_a_case_that_rotates_modes_builds_its_instances_under_inference_mode():
    """An engine may build its layers inside ``torch.inference_mode()``: a constructor that allocates in its caller's
    mode makes inference tensors there, and the first call outside that mode raises. The rotating cases build under
    inference mode (the construction's label says so); the others in the caller's own mode, where it passes."""
    _caught_by_the_rotation_only(catalogue.BuffersInCallersMode)
    leaky = run_on_one_cpu_rank(catalogue.MatmulPrecisionSetAtConstruction,
                                Case("compute", ms=[3], autograd="rotate", **BASE))
    ambient = failed_checks(leaky, "ambient_state_kept")
    assert ambient and "construction max_M=512 N=64 K=64 [inference_mode]" in ambient[0].detail, \
        [c.render() for c in leaky]


@pytest.mark.parametrize("built_under", list(AUTOGRAD_MODES))
def test_the_unfused_path_built_under_any_mode_serves_calls_in_every_mode(built_under):
    """An engine may build a layer -- and the fused kernel then its unfused fallback -- under any mode: built inside
    inference mode, its buffers were inference tensors and the next call outside that mode raised ("Inplace update to
    inference tensor outside InferenceMode")."""
    with AUTOGRAD_MODES[built_under]():
        impl = UnfusedGemmRs(max_M=64, N=32, K=32, device="cpu")
    assert not any(t.is_inference() for t in impl.state_tensors().values())
    # small integers: every product and partial sum is exact in fp32, so the reference's bits are the GEMM's whatever
    # its summation order (gaussian inputs from the unseeded global generator differed in a last bit for about one
    # draw in 300: torch's bf16 and fp32 CPU mm add in different orders; a failure of this test in a full -n 1 run)
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randint(-4, 5, shape, generator=g).to(torch.bfloat16) for shape in ((9, 32), (32, 32)))
    want = torch.mm(x.float(), w.float().t()).bfloat16()
    for mode in (*AUTOGRAD_MODES, *AUTOGRAD_MODES):
        with AUTOGRAD_MODES[mode]():
            assert torch.equal(impl(x, w), want), mode


def test_the_setting_round_trips_and_old_cases_read_as_the_caller_s_mode():
    case = Case("compute", ms=[3], autograd="rotate", **BASE)
    assert Case.from_json(case.to_json()) == case and "autograd=rotate" in case.short()
    old = case.to_json().replace(',"autograd":"rotate"', "").replace('"autograd":"rotate",', "")
    assert "autograd" not in old and Case.from_json(old).autograd is None


def test_an_unknown_setting_is_an_error_not_the_caller_s_mode():
    with pytest.raises(ValueError, match="autograd"):
        CaseCalls(0, 1).rotate_autograd("sometimes")
