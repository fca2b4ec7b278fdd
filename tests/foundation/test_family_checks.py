"""Details of the families' checks that a flip of their conditions changed without any other test noticing (the
29th session's flips of fuzz/families/, docs/evidence/2026-12-05-check-coverage/): a check made where it must be,
and a failure that says what it was about."""

from __future__ import annotations

from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue

BASE = dict(seed=11, N=64, K=64, max_M=512)


def test_batch_invariance_is_checked_on_gaussian_inputs_where_nothing_waives_it():
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5], kind="gaussian", batch_m=40, **BASE))
    (made,) = [c for c in checks if c.name == "batch_invariant"]
    assert made.passed and not made.skipped, made.render()
    assert made.extra["kind"] == "gaussian"


def test_a_result_that_does_not_follow_inputs_changed_in_place_says_so():
    checks = run_on_one_cpu_rank(catalogue.StaleAfterInplaceInputs, Case("compute", ms=[5], kind="exact", **BASE))
    (failed,) = failed_checks(checks, "inputs_changed_in_place")
    assert "the result did not follow them" in failed.detail, failed.detail


def _calls(checks) -> list[tuple[str, int]]:
    """(tag, M) of every call the case made, in order (each valid call makes one ``path_taken``)."""
    return [(c.extra["call"], c.extra["M"]) for c in checks if c.name == "path_taken"]


def test_the_compute_family_makes_each_call_where_its_check_needs_it():
    # the repeats, the in-place call and the batch call right after the first call (a call on other tensors in
    # between would re-stage a pointer-keyed cache); a fresh instance after every call of a multi-M case
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5, 129, 7], batch_m=40, repeat=3, **BASE))
    assert _calls(checks) == [("call0", 5), ("call0.repeat1", 5), ("call0.repeat2", 5), ("call0.fresh_instance", 5),
                              ("inplace", 5), ("batch", 40), ("call1", 129), ("call1.fresh_instance", 129),
                              ("call2", 7), ("call2.fresh_instance", 7)]
    made = [c for c in checks if not c.skipped]
    assert [c.name for c in made].count("returns_out") == 10  # out= guarded on every call, the batch call's too
    for name in ("repeatable", "fresh_per_call", "inputs_changed_in_place", "batch_invariant"):
        assert [c.name for c in made].count(name) == 1, name
    (batch,) = [c for c in made if c.name == "batch_invariant"]
    assert (batch.extra["M_a"], batch.extra["exact"]) == (5, False)
    # one M, no repeat: neither a fresh instance nor a repeat
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("compute", ms=[5], repeat=1, **BASE))
    assert _calls(checks) == [("call0", 5), ("inplace", 5)]
    assert not {"repeatable", "fresh_per_call", "batch_invariant"} & {c.name for c in checks}


def test_the_dispatch_family_tags_each_step_with_the_side_the_layer_takes():
    # unfused: should_run from M = 128 (its threshold), can_run everywhere; the crossover's two sides come after ms
    checks = run_on_one_cpu_rank(UnfusedGemmRs, Case("dispatch", 6, 64, 64, 8192, [127, 128, 127], "exact", out="none"))
    sides = sorted({(c.extra["call"], c.extra["M"], c.extra["side"]) for c in checks if "side" in c.extra})
    assert sides == [("layer0", 127, "torch"), ("layer1", 128, "op"), ("layer2", 127, "torch"),
                     ("layer3", 127, "torch"), ("layer4", 128, "op")]
