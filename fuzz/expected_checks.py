"""The checks a gate run on each topology makes for an implementation that waives nothing: what the summary holds a
run's checks against (:func:`fuzz.summary.unmade_checks`: a check that no case made is listed, with whether every
case skipped it with a reason or none reached it -- a check that never runs is a silent pass), and what
``tests/engine/test_property_families.py`` pins (every name here made by the correct implementation on the CPU).

Not listed (made only where the implementation or the profile asks for them): ``kernel_paths_agree_across_ranks``
(implementations that name their kernels), ``counter_advanced`` / ``counter_wrapped`` (a call counter the gate can
advance), ``unsupported_shape_handled`` (undeclared shapes), ``byte_boundary_rejected`` (the nightly profile), and
the failure-only checks (``call_raised``, ``main_path_available``, ``device_fault``, ``declared_config_served``). A
leaf module: names only.
"""

from __future__ import annotations

#: Made on every topology (fuzz/case.py lists what each family checks).
EVERY_TOPOLOGY = frozenset({
    # every valid call and every case (fuzz/families/calls.py)
    "path_taken", "result_contract", "returns_out", "fresh_result", "fresh_padding_zero", "earlier_results_unchanged",
    "inputs_untouched", "ambient_state_kept", "guard_regions_untouched",
    # compute
    "within_tolerance", "oracle_within_tolerance", "bitwise_equal", "oracle_exact", "nonfinite_pattern_matches",
    "padded_rows_untouched", "repeatable", "fresh_per_call", "inputs_changed_in_place", "no_systematic_bias",
    "batch_invariant",
    # groups (a TP group that is a subgroup of the world)
    "other_groups_untouched", "outside_rank_untouched",
    # instances, dispatch
    "other_instances_untouched", "should_run_stable", "memory_bounded", "released_on_close",
    "dispatch_agrees_across_ranks", "dispatch_sides_agree",
    # capacity, bad_call (its lone rank at W > 1)
    "capacity_rejected", "bad_call_rejected", "bad_call_rejected_alone",
})
#: Made only where CUDA runs (CUDA graphs, streams): on the CPU each is skipped with its reason.
CUDA_ONLY = frozenset({
    "capacity_rejected_in_capture", "graph_replay", "graph_replay_exact", "graph_replay_padding",
    "dispatch_graph_replay", "stream_ordered_result", "stream_ordered_exact", "stream_ordered_padding",
})


def expected_checks(topology: str) -> frozenset[str]:
    """The checks a run on ``topology`` (``cpu``, ``shared-gpu``, ``multi-gpu``, ...) makes."""
    return EVERY_TOPOLOGY if topology == "cpu" else EVERY_TOPOLOGY | CUDA_ONLY


__all__ = ["CUDA_ONLY", "EVERY_TOPOLOGY", "expected_checks"]
