"""An engine's tensor defaults (``Case.defaults = "engine"``): the case's instance built and its eager calls made with
bf16 as the default dtype and the implementation's device as the default device, set back after each."""

from __future__ import annotations

import pytest
import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from fuzz.families.calls import caller_defaults
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue

BASE = dict(seed=21, N=64, K=64, max_M=512)


class DefaultDtypeResetInCall(UnfusedGemmRs):
    """``torch.set_default_dtype(torch.float32)`` in the call ("our helpers assume fp32"): no change in a process
    that keeps torch's default; in an engine's, the caller's bf16 default is gone after the call."""

    def _run(self, x, w, out, M):
        torch.set_default_dtype(torch.float32)
        return super()._run(x, w, out, M)


def test_caller_defaults_sets_the_engine_s_and_gives_them_back():
    before = (torch.get_default_dtype(), torch.get_default_device())
    with caller_defaults("engine", torch.device("cpu")):
        assert torch.get_default_dtype() == torch.bfloat16 and torch.zeros(1).dtype == torch.bfloat16
    assert (torch.get_default_dtype(), torch.get_default_device()) == before
    with caller_defaults(None, torch.device("cpu")):
        assert torch.get_default_dtype() == before[0]
    with pytest.raises(ValueError, match="unknown caller defaults"), caller_defaults("model", torch.device("cpu")):
        pass


def test_the_correct_implementation_passes_under_the_engine_s_defaults_and_the_calls_say_so():
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5, 129], defaults="engine", **BASE))
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]
    tags = [c.extra["call"] for c in checks if c.name == "path_taken"]
    assert tags and all(t.endswith("[engine defaults]") for t in tags), tags
    assert torch.get_default_dtype() == torch.float32  # the harness's own work ran in the process's defaults


def test_flag_words_in_the_default_dtype_fail_only_under_the_engine_s_defaults():
    plain = run_on_one_cpu_rank(catalogue.FlagWordsInDefaultDtype, Case("compute", ms=[5, 129], **BASE))
    assert not failed_checks(plain), [c.render() for c in failed_checks(plain)]
    checks = run_on_one_cpu_rank(catalogue.FlagWordsInDefaultDtype,
                                 Case("compute", ms=[5, 129], defaults="engine", **BASE))
    (raised,) = failed_checks(checks, "call_raised")  # W = 1: two bytes of bf16 are no int32 word
    assert "call0 [engine defaults]" in raised.detail and "to view BFloat16 as Int" in raised.detail, raised.detail


def test_a_default_dtype_changed_under_the_engine_s_defaults_is_caught_and_set_back():
    plain = run_on_one_cpu_rank(DefaultDtypeResetInCall, Case("compute", ms=[5], **BASE))
    assert not failed_checks(plain), [c.render() for c in failed_checks(plain)]
    checks = run_on_one_cpu_rank(DefaultDtypeResetInCall, Case("compute", ms=[5], defaults="engine", **BASE))
    (leak,) = failed_checks(checks, "ambient_state_kept")  # the snapshots are taken inside the defaults
    assert "torch.bfloat16 -> torch.float32" in leak.detail, leak.detail
    assert torch.get_default_dtype() == torch.float32


def test_a_snapshot_inside_another_default_device_reads_the_host_s_state():
    # the flush-to-zero probe makes a tensor: under an engine's default device it must still be the host's
    from properties.ambient import ambient_changes, ambient_snapshot

    before = ambient_snapshot()
    with torch.device("meta"):  # (a device where nothing can be read back: a probe made there would raise)
        inside = ambient_snapshot()
    after = ambient_snapshot()
    key = "flush subnormals to zero"
    assert inside[key] == before[key] and ambient_changes(before, after) == []
