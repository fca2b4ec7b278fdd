"""Issue 14's dimensions: TP layouts, several instances, dispatch. Each new property is fed a wrong input
and fails; the families pass the correct implementation and fail the planted bugs named for them (in
process at W = 1; on gloo ranks for the layouts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _in_process import failed_checks as _failed
from _in_process import run_on_one_cpu_rank as _run

from fuzz.case import Case
from fuzz.families.crossover import crossover_neighbours
from fuzz.layouts import check_layout, layouts_for, outside_ranks, placement, replica_seed
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue
from properties.dispatch import (
    dispatch_agrees_across_ranks,
    dispatch_sides_agree,
    kernel_paths_agree_across_ranks,
    should_run_stable,
)
from properties.state import snapshot, state_unchanged

# --- layouts ------------------------------------------------------------------------------------------------

def test_layouts_are_valid_and_cover_the_issue_s_shapes():
    for W in range(1, 9):
        for layout in layouts_for(W):
            check_layout(layout, W)
    assert layouts_for(1) == []
    assert [[0], [1]] in layouts_for(2) and [[1]] in layouts_for(2)  # 2 x 1; rank 1 of 2, rank 0 outside
    assert [[0, 1], [2, 3]] in layouts_for(4) and [[1, 3]] in layouts_for(4)  # 2 x 2; ranks 1 and 3 of 4
    assert [[0, 1, 2, 3], [4, 5, 6, 7]] in layouts_for(8) and [[0, 1], [2, 3], [4, 5], [6, 7]] in layouts_for(8)
    assert outside_ranks([[1, 3]], 4) == [0, 2] and outside_ranks(None, 4) == []
    assert placement([[0, 2], [1, 3]], 3, 4) == (1, [1, 3]) and placement([[1, 3]], 2, 4) is None
    assert placement(None, 2, 4) == (0, [0, 1, 2, 3])


@pytest.mark.parametrize("layout", [[], [[]], [[1, 0]], [[0, 0]], [[0, 4]], [[0, 1], [1, 2]], [[-1]], "0,1"])
def test_check_layout_rejects_malformed_layouts(layout):
    with pytest.raises(ValueError):
        check_layout(layout, 4)


def test_replicas_draw_different_inputs_and_replica_0_draws_the_case_s():
    assert replica_seed(123, 0) == 123
    assert len({replica_seed(123, i) for i in range(8)}) == 8


def test_a_layout_case_round_trips_through_json():
    case = Case("compute", 1, 64, 64, 512, [3], layout=[[1, 3]])
    assert Case.from_json(case.to_json()) == case
    assert "layout={1,3}" in case.short()


# --- the new properties, fed right and wrong inputs ---------------------------------------------------------

def test_state_unchanged_fails_on_a_changed_or_missing_tensor():
    impl = UnfusedGemmRs(None, max_M=64, N=64, K=64)
    before = snapshot({"a": impl})
    assert {"a: workspace", "a: shard", "a: guard 'after workspace'"} <= set(before)
    assert state_unchanged(before, snapshot({"a": impl}), during="nothing", name="t").passed
    impl.state_tensors()["shard"].view(torch.int16)[3, 5] ^= 1  # one bit (the buffer is uninitialised)
    res = state_unchanged(before, snapshot({"a": impl}), during="a peer's call", name="t")
    assert not res.passed and res.extra["changed"] == ["a: shard"] and "a peer's call" in res.detail
    impl._guard.view(torch.int16)[0] ^= 1  # a red-zone word
    assert "a: guard 'after workspace'" in state_unchanged(before, snapshot({"a": impl}), during="x",
                                                           name="t").extra["changed"]
    assert not state_unchanged(before, {}, during="close", name="t").passed  # state gone counts as changed


def test_dispatch_agrees_across_ranks_fails_when_one_rank_differs():
    assert dispatch_agrees_across_ranks({0: (True, True), 1: (True, True)}, what="M=3").passed
    res = dispatch_agrees_across_ranks({0: (True, True), 1: (False, True)}, what="M=127")
    assert not res.passed and "rank 1: (False, True)" in res.detail


def test_agreement_of_a_group_of_one_rank_is_skipped_not_passed():
    """No peer, nothing to disagree with: the check cannot fail, so it is no pass (a ci run once made every one of
    its dispatch agreement checks on TP groups of one rank and passed a should_run that disagreed across ranks)."""
    for check in (dispatch_agrees_across_ranks, kernel_paths_agree_across_ranks):
        res = check({3: (True, False)}, what="M=127", rank=3)
        assert res.skipped and not res.passed and res.rank == 3 and "no peer" in res.detail, res
        assert res.extra.get("per_example")
        empty = check({}, what="M=1")  # no answer gathered: the harness's failure, never a skip
        assert not empty.passed and not empty.skipped


def test_kernel_paths_agree_across_ranks_names_the_first_m_where_ranks_run_other_kernels():
    """The W = 8 trap of the 13th session as tables: ranks 6 and 7 without the clustered configs run another
    kernel from M = 193; equal tables pass (also written with a repeated piece); a rank without a table, or whose
    path_table raised, fails for every M."""
    clustered = ((1, "pull 64x112"), (193, "pull 64x112c2"), (257, "pull 64x128c2"), (385, "pull 128x256 P=3"))
    plain = ((1, "pull 64x112"), (193, "pull 64x128"), (321, "pull 128x256 P=4"), (385, "pull 128x256 P=3"))
    same = {r: clustered for r in range(8)}
    assert kernel_paths_agree_across_ranks(same, what="i").passed
    repeated = {**same, 3: ((1, "pull 64x112"), (64, "pull 64x112"), *clustered[1:])}
    assert kernel_paths_agree_across_ranks(repeated, what="i").passed
    res = kernel_paths_agree_across_ranks({**same, 6: plain, 7: plain}, what="instance max_M=512", rank=6)
    assert not res.passed and res.rank == 6 and res.extra["first_difference"] == "M=193"
    assert "rank(s) [0, 1, 2, 3, 4, 5]: pull 64x112c2; rank(s) [6, 7]: pull 64x128" in res.detail
    late = {**same, 1: clustered[:3] + ((400, "pull 128x256 P=3"),)}
    assert kernel_paths_agree_across_ranks(late, what="i").extra["first_difference"] == "M=385"
    none = kernel_paths_agree_across_ranks({0: clustered, 1: None}, what="i")
    assert not none.passed and none.extra["first_difference"] == "any M" and "rank(s) [1]: no table" in none.detail
    raised = kernel_paths_agree_across_ranks({0: clustered, 1: "path_table() raised ValueError: x"}, what="i")
    assert not raised.passed and "path_table() raised ValueError" in raised.detail

def test_kernel_paths_that_differ_from_the_first_piece_fail_there():
    a = ((1, "pull 64x112"), (193, "pull 64x128"))
    b = ((1, "push 64x112"), (193, "pull 64x128"))  # another kernel for M = 1..192 only
    res = kernel_paths_agree_across_ranks({0: a, 1: b}, what="i")
    assert not res.passed and res.extra["first_difference"] == "M=1", res.detail


def test_should_run_stable_fails_when_an_answer_moves():
    assert should_run_stable({1: False, 128: True}, {1: False, 128: True}, what="i").passed
    res = should_run_stable({1: False, 128: True}, {1: False, 128: False}, what="instance 0")
    assert not res.passed and "M=128: True then False" in res.detail
    assert not should_run_stable({5: True}, {}, what="i").passed  # an answer not given again


def test_dispatch_sides_agree_compares_shape_padding_and_exact_bits():
    S, N, n_valid = 4, 8, 3
    ref = torch.zeros(S, N, dtype=torch.bfloat16)
    ref[:n_valid] = torch.arange(n_valid * N, dtype=torch.bfloat16).view(n_valid, N)
    assert dispatch_sides_agree(ref.clone(), ref, n_valid, exact=True).passed
    assert not dispatch_sides_agree(ref[:3].clone(), ref, n_valid, exact=True).passed  # shape
    pad = ref.clone()
    pad[3, 0] = -0.0
    assert not dispatch_sides_agree(pad, ref, n_valid, exact=False).passed  # padding bits
    val = ref.clone()
    val[1, 2] += 1
    assert not dispatch_sides_agree(val, ref, n_valid, exact=True).passed  # exact values
    # non-exact inputs: values are within_tolerance's to judge (each side against the truth), not this check's
    assert dispatch_sides_agree(val, ref, n_valid, exact=False).passed


@pytest.mark.parametrize("row", [0, 2])
def test_dispatch_sides_agree_compares_every_valid_row_in_exact_mode(row):
    S, N, n_valid = 4, 8, 3
    ref = torch.zeros(S, N, dtype=torch.bfloat16)
    ref[:n_valid] = torch.arange(n_valid * N, dtype=torch.bfloat16).view(n_valid, N)
    val = ref.clone()
    val[row, N - 1] += 1  # the first and the last valid row
    res = dispatch_sides_agree(val, ref, n_valid, exact=True, row_offset=4)
    assert not res.passed and not res.skipped and res.worst_index == (row, N - 1) and res.worst_row == 4 + row


def test_crossover_neighbours_finds_both_sides_of_the_switch():
    assert crossover_neighbours(lambda M: M >= 128, 8192) == [127, 128]
    assert crossover_neighbours(lambda M: True, 100) == [1]
    assert crossover_neighbours(lambda M: False, 100) == []


# --- the families in process (W = 1) -------------------------------------------------------------------------

INSTANCES = Case("instances", 5, 64, 64, 8192, [300, 5, 129, 1000], "exact",
                 shapes=[[128, 128, 1024], [224, 256, 257]], order=[1, 0, 2, 0], recreate=[[192, 64, 4096]])
DISPATCH = Case("dispatch", 6, 64, 64, 8192, [127, 128, 127], "exact", out="none")


def test_the_correct_implementation_passes_instances_and_dispatch():
    for case in (INSTANCES, DISPATCH):
        checks = _run(UnfusedGemmRs, case)
        assert not _failed(checks), [c.render() for c in _failed(checks)]
    names = {c.name for c in _run(UnfusedGemmRs, INSTANCES)}
    assert {"other_instances_untouched", "should_run_stable", "bitwise_equal", "path_taken"} <= names
    names = {c.name for c in _run(UnfusedGemmRs, DISPATCH)}
    assert {"dispatch_agrees_across_ranks", "should_run_stable", "dispatch_sides_agree", "path_taken"} <= names


def test_class_level_threshold_fails_should_run_stable():
    try:
        assert _failed(_run(catalogue.ThresholdAtClassLevel, INSTANCES), "should_run_stable")
    finally:
        catalogue.ThresholdAtClassLevel.should_run_min_m = UnfusedGemmRs.should_run_min_m


def test_class_level_capacity_fails_a_valid_call():
    catalogue.CapacityAtClassLevel._plan.clear()
    assert _failed(_run(catalogue.CapacityAtClassLevel, INSTANCES), "call_raised")


class _SharedAcrossInstances(UnfusedGemmRs):
    """A call that writes into every other instance's workspace (one flag area for all instances)."""

    live: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.live.append(self)

    def _run(self, x, w, out, M):
        for other in self.live:
            if other is not self:
                other._ws[0, 0] = float(M)
        return super()._run(x, w, out, M)


def test_a_call_that_writes_another_instance_s_state_fails_other_instances_untouched():
    assert _failed(_run(_SharedAcrossInstances, INSTANCES), "other_instances_untouched")


class _ShouldRunFromCallCount(UnfusedGemmRs):
    """should_run that changes with time (an autotuner that lowers its threshold after two warm-up calls):
    not a function of M alone."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def should_run(self, x):
        return x.shape[0] >= (128 if self.calls < 2 else 1)

    def _run(self, x, w, out, M):
        self.calls += 1
        return super()._run(x, w, out, M)


def test_a_should_run_that_moves_fails_in_the_dispatch_family():
    assert _failed(_run(_ShouldRunFromCallCount, DISPATCH), "should_run_stable")


def test_a_wrong_result_fails_dispatch_sides_agree():
    assert _failed(_run(catalogue.OutputScaledSlightly, DISPATCH), "dispatch_sides_agree")


def test_streams_and_graphs_are_skipped_on_the_cpu_with_the_reason():
    for family, name in (("streams", "stream_ordered_result"), ("graph", "graph_replay")):
        checks = _run(UnfusedGemmRs, Case(family, 1, 64, 64, 512, [3]))
        assert [c.name for c in checks] == [name] and checks[0].skipped and "no CUDA" in checks[0].detail


# --- layouts on gloo ranks -----------------------------------------------------------------------------------

def _case(layout, **kw) -> str:
    return Case("compute", 11, 64, 64, 512, [5, 130], "exact", layout=layout, **kw).to_json()


@pytest.mark.multiproc
def test_layouts_on_two_ranks(dist_helpers):
    """W = 2: the correct implementation passes on 2 x 1 and on rank 1 alone (rank 0 outside, checked);
    the global rank where the group rank is meant fails, so does the collective on the world group; state
    that changes while the groups run fails on the outside rank and on the group's rank (its world
    instance)."""
    runs = [
        ["unfused", _case([[0], [1]])],
        ["unfused", _case([[1]])],
        ["mutants.catalogue:GlobalRankAsGroupRank", _case([[0], [1]])],
        ["mutants.catalogue:CollectiveOnWorldGroup", _case([[0], [1]])],
        ["StateWrittenFromOutside", _case([[1]])],
    ]
    worker = Path(__file__).resolve().parent / "_dims_workers.py"
    verdicts = dist_helpers.run_ranks(worker, "layout_cases", 2, {"runs": runs}, timeout=180)
    info = {v["rank"]: v["info"]["runs"] for v in verdicts}
    for rank in (0, 1):
        ok_partition, ok_outside = info[rank][0], info[rank][1]
        assert ok_partition["failed"] == [] and ok_outside["failed"] == [], json.dumps(info)
        assert ok_partition["groups"] == [[[rank], 0]]  # every group check with its group and group rank 0
    assert "outside_rank_untouched" in info[0][1]["passed"] and info[1][1]["groups"] == [[[1], 0]]
    assert "other_groups_untouched" in info[1][1]["passed"]  # rank 1 runs in the group: its world instance
    assert "within_tolerance" in info[1][2]["failed"]  # rank 1: group rank 0, world rank 1
    assert "within_tolerance" in info[0][3]["failed"] and "within_tolerance" in info[1][3]["failed"]
    assert info[0][4]["failed"] == ["outside_rank_untouched"] and info[1][4]["failed"] == ["other_groups_untouched"]
