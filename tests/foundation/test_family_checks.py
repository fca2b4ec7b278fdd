"""Details of the families' checks that a flip of their conditions changed without any other test noticing (the
29th session's flips of fuzz/families/, docs/evidence/2026-12-05-check-coverage/): a check made where it must be,
and a failure that says what it was about."""

from __future__ import annotations

import pytest
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue, peer_styles

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


class _WrongWhenBackToBack(UnfusedGemmRs):
    """A test implementation wrong only on a call that follows its last one with neither the oracle nor a wait
    between them (the harness's ``reference`` and ``sync``, patched below, clear the mark): what a rank whose next
    call overwrites the data a peer still reads looks like -- right wherever the ranks were lined up in between."""

    name = "test-wrong-when-back-to-back"
    live: list = []  # every instance: the oracle's reference clears each one's mark

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if getattr(self, "pending", False):
            y[: self.valid_rows(M)].add_(1.0)
        self.pending = True
        type(self).live.append(self)
        return y


class _WrongAfterAnotherInstance(UnfusedGemmRs):
    """A test implementation wrong only on a call that follows another instance's call with neither the oracle nor
    a wait between them: instances sharing a buffer whose flags are their own look like this."""

    name = "test-wrong-after-another-instance"
    last: list = [None]  # the instance that made the last call since the ranks were last lined up

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if type(self).last[0] not in (None, self):
            y[: self.valid_rows(M)].add_(1.0)
        type(self).last[0] = self
        return y


def _burst_run(monkeypatch, impl_cls, case):
    """``run_on_one_cpu_rank``, recording the order of the calls, the oracle's references and the syncs."""
    from fuzz.families import context

    events = []
    call, reference, sync = context.RankContext.call, context.RankContext.reference, context.RankContext.sync

    def recorded_call(self, impl, x, w, out=None, *, tag, **kw):
        events.append(tag)
        return call(self, impl, x, w, out, tag=tag, **kw)

    def lined_up():
        for impl in _WrongWhenBackToBack.live:
            impl.pending = False
        _WrongAfterAnotherInstance.last[0] = None

    def recorded_reference(self, x, w):
        events.append("reference")
        lined_up()
        return reference(self, x, w)

    def recorded_sync(self):
        events.append("sync")
        lined_up()
        return sync(self)

    monkeypatch.setattr(context.RankContext, "call", recorded_call)
    monkeypatch.setattr(context.RankContext, "reference", recorded_reference)
    monkeypatch.setattr(context.RankContext, "sync", recorded_sync)
    _WrongWhenBackToBack.live.clear()
    return run_on_one_cpu_rank(impl_cls, case), events


def test_a_burst_launches_its_calls_back_to_back_and_checks_each(monkeypatch):
    """``Case.burst``: the calls of ms once more, on new inputs, with no oracle and no wait between them, then one
    sync and the checks of each (tags burst<i>); the family's other calls (no repeats here) each have the oracle or
    a wait before the next. A result wrong only back to back fails there and nowhere else."""
    case = Case("compute", ms=[5, 9], kind="exact", repeat=1, burst=True, **BASE)
    checks, events = _burst_run(monkeypatch, UnfusedGemmRs, case)
    first = events.index("burst0")
    assert events[first: first + 3] == ["burst0", "burst1", "sync"]
    assert events[first + 3:].count("reference") == 2
    for i, M in enumerate(case.ms):
        made = {c.name for c in checks if c.extra.get("call") == f"burst{i}" and not c.skipped}
        assert {"within_tolerance", "bitwise_equal", "guard_regions_untouched", "path_taken"} <= made, made
        assert all(c.passed or c.skipped for c in checks if c.extra.get("call") == f"burst{i}")
        assert next(c for c in checks if c.extra.get("call") == f"burst{i}" and c.name == "path_taken").extra["M"] == M
    # one M: two calls at it, each on its own inputs
    checks, events = _burst_run(monkeypatch, UnfusedGemmRs, Case("compute", ms=[5], repeat=1, burst=True, **BASE))
    assert [e for e in events if e.startswith("burst")] == ["burst0", "burst1"]
    # wrong only back to back: the burst's checks fail (its second call), every verified call passes
    checks, _ = _burst_run(monkeypatch, _WrongWhenBackToBack, case)
    failed = failed_checks(checks)
    assert failed and {c.extra.get("call") for c in failed} == {"burst1"}, [c.render() for c in failed]
    assert {c.name for c in failed} >= {"within_tolerance", "bitwise_equal"}
    checks, _ = _burst_run(monkeypatch, _WrongWhenBackToBack, Case("compute", ms=[5, 9], kind="exact", repeat=1,
                                                                    **BASE))
    assert not failed_checks(checks)  # no burst: the same implementation passes the case


class _FakeGraph:
    """A replayable "graph" on the CPU (the family's step 5 without CUDA): each replay writes the shard of
    ``x @ w.T`` into ``out``; ``lag`` makes it use the inputs its previous replay saw (what a replay reading the
    partials its own last replay left, before the peers wrote this one's, returns)."""

    def __init__(self, g, lag: bool):
        self.g, self.lag, self.seen = g, lag, None

    def replay(self):
        g = self.g
        x, w = (self.seen if self.lag and self.seen is not None else (g.x, g.w))
        self.seen = (g.x.clone(), g.w.clone())
        g.out[: g.n_valid].copy_((x.float() @ w.float().T)[: g.n_valid].to(g.out.dtype))


def _in_a_row(lag: bool, kind: str, late_rank=None):
    import types

    import torch

    from fuzz.families import graph
    from fuzz.families.context import RankContext
    from properties import sentinel_like

    case = Case("graph", ms=[6], kind=kind, out="guarded", late_rank=late_rank, delay_ms=1 if late_rank is not None
                else 0, **BASE)
    ctx = RankContext(UnfusedGemmRs, rank=0, world_size=1, device=torch.device("cpu"))
    # a shard of 8 rows, 6 valid (as rank 0's at M = 14, W = 2): two padding rows to leave untouched
    g = types.SimpleNamespace(M=6, index=0, S=8, n_valid=6, row0=0, out_waived=False,
                              x=ctx.x(case, 1, 6), w=ctx.w(case, 1), out=sentinel_like((8, case.N)))
    g.graph = _FakeGraph(g, lag)
    delays = []
    ctx.delay = delays.append
    return graph.in_a_row(ctx, case, [g]), delays


def test_graphs_replayed_in_a_row_are_each_judged_on_their_own_inputs():
    """Step 5 of the graph family: IN_A_ROW replays of one graph with nothing between, each result copied before the
    next replay and judged against its own inputs' truth (exact: bitwise). A replay that returns what its previous
    inputs gave fails from the second replay on; the late rank's delay comes before each replay."""
    from fuzz.families.graph import IN_A_ROW

    for kind in ("exact", "gaussian"):
        checks, delays = _in_a_row(lag=False, kind=kind, late_rank=0)
        assert checks and not failed_checks(checks), [c.render() for c in failed_checks(checks)]
        assert delays == [1] * IN_A_ROW
        names = {"graph_replay", "graph_replay_padding"} | ({"graph_replay_exact"} if kind == "exact" else set())
        for i in range(IN_A_ROW):
            made = {c.name for c in checks if c.extra["replay"] == f"in_a_row{i}" and not c.skipped}
            assert made == names, (kind, i, made)
        checks, _ = _in_a_row(lag=True, kind=kind)
        failed = failed_checks(checks)
        assert {c.extra["replay"] for c in failed} == {f"in_a_row{i}" for i in range(1, IN_A_ROW)}, kind
        assert "graph_replay" in {c.name for c in failed}
    assert _in_a_row(lag=False, kind="exact")[1] == []  # no late rank: no delay


def test_the_instances_family_calls_the_instances_again_back_to_back(monkeypatch):
    """After the verified interleaved calls, the same calls once more on new inputs with no oracle and no wait
    between them (tags ``<instance>.burst<i>``, the late rank's delay before each), then one sync and the checks of
    each. A result wrong only right after another instance's call fails there and nowhere else."""
    case = Case("instances", ms=[5, 9, 6], kind="exact", repeat=1, shapes=[[32, 48, 64]], order=[0, 1, 0], **BASE)
    checks, events = _burst_run(monkeypatch, UnfusedGemmRs, case)
    tags = ["instance 0.burst0", "instance 1.burst1", "instance 0.burst2"]
    first = events.index(tags[0])
    assert events[first: first + 4] == [*tags, "sync"], events[first:]
    for tag in tags:
        made = {c.name for c in checks if c.extra.get("call") == tag and not c.skipped}
        assert {"within_tolerance", "bitwise_equal", "guard_regions_untouched", "path_taken"} <= made, (tag, made)
    assert not failed_checks(checks)
    checks, _ = _burst_run(monkeypatch, _WrongAfterAnotherInstance, case)
    failed = failed_checks(checks)
    assert {c.extra.get("call") for c in failed} == set(tags[1:]), [c.render() for c in failed]
    assert {c.name for c in failed} >= {"within_tolerance", "bitwise_equal"}


@pytest.mark.parametrize("impl", [catalogue.PeerResultCacheByPtrVersion, peer_styles.PeerWeightCacheByPtrVersion])
def test_a_cache_keyed_by_pointer_and_version_fails_inputs_changed_in_place(impl):
    # the in-place values are written past the tensors' version counters (as a Triton kernel or a receive writes):
    # a (data_ptr, _version) key still matches and the stale entry comes back (peer-style audit, 2026-12-06)
    for kind in ("exact", "gaussian"):
        checks = run_on_one_cpu_rank(impl, Case("compute", ms=[5], kind=kind, **BASE))
        (failed,) = failed_checks(checks, "inputs_changed_in_place")
        assert "the result did not follow them" in failed.detail, failed.detail
        assert not [c for c in checks if not c.passed and not c.skipped and c.name != "inputs_changed_in_place"]


def test_the_in_place_write_keeps_the_version_counters():
    # the weaker write (x.copy_, which moves x._version) misses a version-keyed cache: the family must not use it
    from fuzz.families import compute

    seen = {}

    class _Recorder(UnfusedGemmRs):
        name = "test-version-recorder"

        def _run(self, x, w, out, M):
            seen.setdefault("versions", []).append((x._version, w._version))
            return super()._run(x, w, out, M)

    checks = run_on_one_cpu_rank(_Recorder, Case("compute", ms=[5], kind="exact", repeat=1, **BASE))
    assert [c.extra["call"] for c in checks if c.name == "path_taken"] == ["call0", "inplace"]
    assert seen["versions"][0] == seen["versions"][1], "the in-place values moved x's or w's _version"
    assert "_version" in (compute.inputs_changed_in_place.__doc__ or "")
