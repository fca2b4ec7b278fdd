"""The graph and streams families' checks, and the capacity and dispatch families' captured ones, on CPU ranks under
a CPU model of CUDA streams and graphs (tests/foundation/_fake_cuda.py): each check fails on an implementation whose
bug only it sees, and the model's control passes every check. These are the checks the 36th session's audit of
fuzz/families/ found unguarded off a GPU: a replay on another stream (G1), the replay padding against the buffer
before the replay (G4), replays of one graph in a row (G5), the caller's copy taken right after the call (T1), the
bitwise check against the oracle (T2); and those docs/evidence/2026-12-06d-families-audit/ found: a replay's bits
against the oracle's (graph and dispatch), the eager call after the graphs, the red zones around out and the padding
against the sentinel under streams."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _dist import run_ranks
from _fake_cuda import (
    CapacityUncheckedWhileCapturing,
    OneUlpOffOnExactInputs,
    Replayable,
    ResultLandsAtSync,
    StaleOnBackToBackReplays,
    StaleReplay,
    WrongOnAnotherStream,
    installed,
)
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from fuzz.families import graph as graph_family
from mutants import catalogue

BASE = dict(seed=11, N=64, K=64, max_M=64)


def _graph(kind="gaussian", **kw):
    return Case("graph", ms=kw.pop("ms", [5]), kind=kind, repeat=3, **{**BASE, **kw})


def _stream(kind="gaussian", out="guarded", **kw):
    return Case("streams", ms=kw.pop("ms", [5, 9]), kind=kind, out=out, repeat=1, **{**BASE, **kw})


def _failed(checks):
    return [c.render() for c in failed_checks(checks)]


@pytest.mark.parametrize("case", [_graph(), _graph("exact"), _stream(), _stream("exact", out="none")],
                         ids=["graph", "graph-exact", "streams", "streams-exact-fresh"])
def test_the_models_control_passes_every_check_and_the_families_really_ran(case):
    with installed() as rt:
        checks = run_on_one_cpu_rank(Replayable, case)
    assert not failed_checks(checks), _failed(checks)
    names = {c.name for c in checks if c.passed}
    if case.family == "graph":
        assert "graph_replay" in names, names  # (W = 1: no padding rows; their check at W = 2 below)
        assert ("graph_replay_exact" in names) == (case.kind == "exact"), names
        replays = [r for g in rt.graphs for r in g.replays]
        # 3 rounds (one on another stream) and 3 in a row, per graph
        assert len(replays) == len(rt.graphs) * (3 + graph_family.IN_A_ROW), replays
    else:
        assert "stream_ordered_result" in names, names
        assert ("stream_ordered_exact" in names) == (case.kind == "exact"), names


def test_a_replay_on_another_stream_than_the_captures_is_checked():
    checks = run_on_one_cpu_rank_with_model(WrongOnAnotherStream, _graph())
    bad = failed_checks(checks, "graph_replay")
    assert bad, _failed(checks)
    assert {c.extra.get("on_other_stream") for c in bad} == {True}, [c.extra for c in bad]


def test_a_replay_that_leaves_the_captures_result_is_caught_on_every_replay():
    checks = run_on_one_cpu_rank_with_model(StaleReplay, _graph())
    bad = failed_checks(checks, "graph_replay")
    assert {c.extra.get("replay") for c in bad} == {0, 1, 2, "in_a_row0", "in_a_row1", "in_a_row2"}, _failed(checks)


def test_replays_of_one_graph_in_a_row_are_checked():
    checks = run_on_one_cpu_rank_with_model(StaleOnBackToBackReplays, _graph())
    bad = failed_checks(checks, "graph_replay")
    assert bad, _failed(checks)
    # the second and third of each graph's replays in a row: never one of the rounds'
    assert {c.extra.get("replay") for c in bad} == {"in_a_row1", "in_a_row2"}, [c.extra for c in bad]


def test_the_caller_reads_the_result_right_after_the_call_not_after_the_sync():
    checks = run_on_one_cpu_rank_with_model(ResultLandsAtSync, _stream())
    assert failed_checks(checks, "stream_ordered_result"), _failed(checks)


def test_exact_inputs_under_streams_are_compared_bitwise_with_the_oracle():
    checks = run_on_one_cpu_rank_with_model(OneUlpOffOnExactInputs, _stream("exact"))
    assert failed_checks(checks, "stream_ordered_exact"), _failed(checks)
    assert not failed_checks(checks, "stream_ordered_result"), _failed(checks)  # one ulp is within tolerance


def test_the_replay_padding_is_compared_with_what_out_held_before_the_replay():
    # W = 2, M = 5: rank 1 holds 2 valid rows of 3, so its out= has a padding row each replay writes
    worker = Path(__file__).resolve().parent / "_fake_cuda.py"
    control, planted = (run_ranks(worker, "graph_case_on_ranks", 2, {"impl": impl, "case_json": _graph().to_json()},
                                  timeout=120) for impl in ("Replayable", "PaddingWrittenOnReplay"))
    assert all(not v["info"]["failed"] for v in control), control
    assert "graph_replay_padding" in {v["rank"]: v["info"] for v in control}[1]["passed"], control
    by_rank = {v["rank"]: v["info"] for v in planted}
    assert "graph_replay_padding" in by_rank[1]["failed"], by_rank
    assert 5 in by_rank[1]["failed_at_rows"], by_rank  # the global row past M - 1, on the rank that has it
    assert not by_rank[0]["failed"], by_rank  # rank 0 has no padding row


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # the planted M past max_M
def test_a_capacity_check_skipped_inside_a_capture_fails_the_captured_rejection():
    case = Case("capacity", bad="over", ms=[5], repeat=1, **BASE)
    control = run_on_one_cpu_rank_with_model(Replayable, case)
    assert not failed_checks(control), _failed(control)
    assert "capacity_rejected_in_capture" in {c.name for c in control if c.passed}
    checks = run_on_one_cpu_rank_with_model(CapacityUncheckedWhileCapturing, case)
    assert failed_checks(checks, "capacity_rejected_in_capture"), _failed(checks)
    assert not failed_checks(checks, "capacity_rejected"), _failed(checks)  # the eager call is still rejected


def test_the_dispatch_layer_captured_in_a_graph_is_replayed_on_new_inputs_and_checked():
    case = Case("dispatch", ms=[5, 9], repeat=1, **BASE)
    control = run_on_one_cpu_rank_with_model(Replayable, case)
    assert not failed_checks(control), _failed(control)
    assert "dispatch_graph_replay" in {c.name for c in control if c.passed}, sorted({c.name for c in control})
    checks = run_on_one_cpu_rank_with_model(StaleReplay, case)
    assert failed_checks(checks, "dispatch_graph_replay"), _failed(checks)


def run_on_one_cpu_rank_with_model(impl, case):
    with installed():
        return run_on_one_cpu_rank(impl, case)


class _ReplayOneUlpOff(Replayable):
    """Every replay one unit in the last place off in each valid element (the eager and captured calls are right):
    within any tolerance, never bitwise the oracle's."""

    name = "test-replay-one-ulp-off"

    def replayed(self, g, x, w, y):
        super().replayed(g, x, w, y)
        y[: self.valid_rows(x.shape[0])].view(torch.int16).add_(1)


@pytest.mark.parametrize("family, check", [("graph", "graph_replay_exact"), ("dispatch", "dispatch_graph_replay")])
def test_a_replay_on_exact_inputs_is_compared_bit_for_bit_with_the_oracle(family, check):
    case = Case(family, ms=[5], kind="exact", repeat=3 if family == "graph" else 1, **BASE)
    checks = run_on_one_cpu_rank_with_model(_ReplayOneUlpOff, case)
    assert failed_checks(checks, check), _failed(checks)
    assert not failed_checks(checks, "graph_replay"), _failed(checks)  # one ulp is within tolerance



def test_the_red_zones_around_out_are_read_after_each_stream_ordered_call():
    # (on a GPU a kernel's store past out is no torch op: the red zones are its only witness)
    checks = run_on_one_cpu_rank_with_model(catalogue.RowPastEndOfOut, _stream())
    bad = failed_checks(checks, "guard_regions_untouched")
    assert {c.extra.get("call") for c in bad} >= {"stream0", "stream1"}, _failed(checks)


def test_the_stream_ordered_padding_is_compared_with_the_sentinel_out_held():
    # W = 2, M = 5: rank 1 holds 2 valid rows of 3; its out='s padding row must keep the sentinel
    worker = Path(__file__).resolve().parent / "_fake_cuda.py"
    ranks = run_ranks(worker, "graph_case_on_ranks", 2, {"impl": "mutants.catalogue:PaddingRowsZeroed",
                                                          "case_json": _stream(ms=[5]).to_json()}, timeout=120)
    by_rank = {v["rank"]: v["info"] for v in ranks}
    assert "stream_ordered_padding" in by_rank[1]["failed"], by_rank
    assert "stream_ordered_padding" not in by_rank[0]["failed"], by_rank  # rank 0 has no padding row


class _EpochOffAfterReplaysInARow(Replayable):
    """Replays of one graph in a row leave the instance's epoch one behind: the next eager call (the one after the
    graphs are gone) is one too large in every valid element."""

    name = "test-epoch-off-after-replays-in-a-row"

    def replayed(self, g, x, w, y):
        super().replayed(g, x, w, y)
        if g.replays[-1][1]:
            self.behind = True

    def __call__(self, x, w, out=None):
        y = super().__call__(x, w, out=out)
        if getattr(self, "behind", False) and not torch.cuda.is_current_stream_capturing():
            y[: self.valid_rows(x.shape[0])].add_(1.0)
        return y


def test_the_eager_call_after_the_graphs_is_verified():
    checks = run_on_one_cpu_rank_with_model(_EpochOffAfterReplaysInARow, _graph())
    bad = failed_checks(checks, "within_tolerance")
    assert {c.extra.get("call") for c in bad} == {"eager_after_graph"}, _failed(checks)
