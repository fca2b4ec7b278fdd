"""ambient_state_kept (properties/ambient.py, checked around every eager call by fuzz/families/calls.py): a call
leaves the caller's grad mode, math flags, default dtype, thread count, subnormal mode, random generators -- and on
a GPU its current device and stream -- as it found them. The checker fails on each leak, the correct implementation
passes, the planted leaks fail it, and the harness sets the state back after a leaking call (each call that leaks
fails, and nothing after it runs in the leaked state)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue
from properties import ambient_changes, ambient_restore, ambient_snapshot, ambient_state_kept
from properties.ambient import AMBIENT_ITEMS

BASE = dict(seed=5, N=64, K=64, max_M=512)


@contextlib.contextmanager
def _kept():
    """The test's own guard: whatever a leak below does, the test process gets its state back."""
    before = ambient_snapshot()
    try:
        yield before
    finally:
        ambient_restore(before, ambient_snapshot())


LEAKS = {
    "grad mode": lambda: torch.set_grad_enabled(False),
    "default dtype": lambda: torch.set_default_dtype(torch.float64),
    "deterministic algorithms": lambda: torch.use_deterministic_algorithms(True, warn_only=True),
    "fp32 matmul precision": lambda: torch.set_float32_matmul_precision("medium"),
    "cuda matmul bf16 reduced-precision reduction":
        lambda: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False),
    "cuda matmul fp16 reduced-precision reduction":
        lambda: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", False),
    "cudnn allow_tf32 / deterministic / benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", True),
    "autocast (cpu, cuda)": lambda: torch.set_autocast_enabled("cpu", True),
    "default device": lambda: torch.set_default_device("meta"),
    "anomaly detection": lambda: torch.autograd.set_detect_anomaly(True),
    "attention backends (flash, mem-efficient, math, cudnn)": lambda: torch.backends.cuda.enable_flash_sdp(False),
    "cuda matmul fp16 accumulation":
        lambda: setattr(torch.backends.cuda.matmul, "allow_fp16_accumulation", True),
    "mkldnn enabled": lambda: setattr(torch.backends.mkldnn, "enabled", False),
    "intra-op threads": lambda: torch.set_num_threads(torch.get_num_threads() + 1),
    "flush subnormals to zero": lambda: torch.set_flush_denormal(True),
    "CPU random generator state": lambda: torch.rand(1),
}


def test_every_item_read_has_a_leak_test_here():
    assert set(LEAKS) | {"inference mode", "cuda matmul allow_tf32"} == set(AMBIENT_ITEMS)


@pytest.mark.parametrize("item", sorted(LEAKS))
def test_each_leak_is_seen_named_and_set_back(item):
    with _kept():
        before = ambient_snapshot()
        assert not ambient_changes(before, ambient_snapshot())  # reading changes nothing (the probe included)
        LEAKS[item]()
        after = ambient_snapshot()
        changed = ambient_changes(before, after)
        assert any(line.startswith(f"{item}:") for line in changed), changed
        assert ambient_restore(before, after) == []
        assert ambient_changes(before, ambient_snapshot()) == []


def test_the_checker_passes_clean_calls_and_fails_naming_call_and_item():
    ok = ambient_state_kept([("call0 (M=8)", []), ("call1 (M=9)", [])], rank=0)
    assert ok.passed and ok.total == 2
    bad = ambient_state_kept([("call0 (M=8)", []), ("call1 (M=9)", ["grad mode: True -> False"])], rank=1)
    assert not bad.passed and bad.n_wrong == 1 and bad.extra["changed"] == ["call1 (M=9)"]
    assert "call1 (M=9): grad mode: True -> False" in bad.render()


def test_a_state_no_setter_reaches_is_reported_as_stuck():
    with _kept():
        before = ambient_snapshot()
        with torch.inference_mode():
            assert "inference mode" in ambient_restore(before, ambient_snapshot())


def test_the_correct_implementation_keeps_the_caller_s_state():
    with _kept() as before:
        checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[3, 129], **BASE))
        assert not ambient_changes(before, ambient_snapshot())
    kept = [c for c in checks if c.name == "ambient_state_kept"]
    assert kept and all(c.passed and c.total >= 2 for c in kept), [c.render() for c in kept]


@pytest.mark.parametrize("mutant, item", [
    ("ReductionFlagNotRestored", "cuda matmul bf16 reduced-precision reduction"),
    ("GradModeLeftOff", "grad mode"),
    ("WorkspacePoisonDrawsRng", "CPU random generator state"),
    ("MatmulPrecisionSetAtConstruction", "fp32 matmul precision"),
])
def test_planted_leaks_fail_it_on_every_call_and_the_state_is_set_back(mutant, item):
    with _kept() as before:
        checks = run_on_one_cpu_rank(getattr(catalogue, mutant), Case("compute", ms=[5, 100], **BASE))
        assert not ambient_changes(before, ambient_snapshot()), "the harness did not set the leak back"
    bad = failed_checks(checks, "ambient_state_kept")
    assert bad, f"{mutant} passed ambient_state_kept"
    changed = bad[0].extra["changed"]
    constructions = [label for label in changed if label.startswith("construction")]
    # each construction, or each call -- not only the process's first (the leak is set back after each): the case
    # made 3 instances (its own and 2 fresh ones) and 6 eager calls
    if mutant == "MatmulPrecisionSetAtConstruction":
        assert len(constructions) == len(changed) == 3, bad[0].render()
    else:
        assert not constructions and len(changed) == bad[0].total - 3 == 6, bad[0].render()
    assert item in bad[0].detail
    others = [c for c in failed_checks(checks) if c.name != "ambient_state_kept"]
    assert not others, [c.render() for c in others]  # values right: only this check can catch it


@pytest.mark.gpu
def test_a_stream_left_current_is_seen_and_given_back():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: the current stream is a CUDA state")
    torch.cuda.init()
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        assert not ambient_changes(ambient_snapshot(dev), ambient_snapshot(dev))
    before = ambient_snapshot(dev)
    torch.cuda.set_stream(side)
    after = ambient_snapshot(dev)
    changed = ambient_changes(before, after)
    assert any(line.startswith("current stream of the current device") for line in changed), changed
    assert ambient_restore(before, after) == []
    assert torch.cuda.current_stream(dev) == before["current stream of the current device"]
    before = ambient_snapshot(dev)
    torch.rand(4, device=dev)
    assert any("random generator state of cuda" in line for line in ambient_changes(before, ambient_snapshot(dev)))


def test_a_rejected_call_that_leaks_fails_rejected_cleanly_and_is_set_back():
    from properties import rejected_cleanly

    def leaky_rejection():
        torch.set_grad_enabled(False)
        raise ValueError("M out of range")

    def clean_rejection():
        raise ValueError("M out of range")

    with _kept() as before:
        bad = rejected_cleanly(leaky_rejection, ValueError, {})
        assert not ambient_changes(before, ambient_snapshot())
    assert not bad.passed and "grad mode: True -> False" in bad.detail
    assert rejected_cleanly(clean_rejection, ValueError, {}).passed


def test_a_construction_alone_makes_no_passing_check():
    """A case whose family did not run (the host lacks the main path) has no ambient_state_kept beside its failure:
    a kept construction is no check that could make a skipped case look passed -- a leaking one still fails."""
    from fuzz.families.calls import CaseCalls

    calls = CaseCalls(0, 1)
    calls.ambient_kept("construction max_M=8 N=8 K=8", ambient_snapshot(), None, call=False)
    assert not [c for c in calls.finish() if c.name == "ambient_state_kept"]
    with _kept():
        before = ambient_snapshot()
        torch.set_grad_enabled(False)
        calls.ambient_kept("construction max_M=8 N=8 K=8", before, None, call=False)
    assert [c.passed for c in calls.finish() if c.name == "ambient_state_kept"] == [False]


def test_a_grad_mode_leak_shows_in_a_rotated_case_too():
    """The autograd rotation's contexts restore grad mode on exit: the snapshots are taken inside them, so the call
    under grad enabled still shows ``GradModeLeftOff``'s leak (under no_grad and inference mode grad is off anyway)."""
    with _kept():
        checks = run_on_one_cpu_rank(catalogue.GradModeLeftOff, Case("compute", ms=[5, 100], autograd="rotate",
                                                                     **BASE))
    bad = failed_checks(checks, "ambient_state_kept")
    assert bad and all("[grad]" in label for label in bad[0].extra["changed"]), [c.render() for c in checks]


def test_an_item_this_torch_cannot_read_is_named_in_the_pass(monkeypatch):
    """A query torch lacks reads "n/a" before and after: it cannot fail, so the pass names it instead of claiming it."""
    import properties.ambient as ambient

    real = ambient._host_items

    def missing():
        raise AttributeError("this torch has no such query")

    def without_threads():
        return [(n, missing if n == "intra-op threads" else q, s) for n, q, s in real()]

    monkeypatch.setattr(ambient, "_host_items", without_threads)
    before = ambient_snapshot()
    assert before.unread == ambient_snapshot().unread == ("intra-op threads",)
    ok = ambient_state_kept([("call0 (M=8)", [])], unread=before.unread)
    assert ok.passed and "not read on this torch, so not checked: intra-op threads" in ok.detail
    assert ok.extra["unread"] == ["intra-op threads"]
    monkeypatch.undo()
    assert ambient_snapshot().unread == ()  # torch 2.13 reads every item
    assert "not read" not in ambient_state_kept([("call0 (M=8)", [])]).detail
