"""Every property family the gate promises actually runs (a check that never executes is a silent pass)."""

from __future__ import annotations

import pytest

from fuzz.case import BAD_CALLS, CAPACITY_BADS, Case, PoolSpec
from fuzz.expected_checks import expected_checks
from fuzz.pool import RankPool
from fuzz.status import Status
from properties.padding import NO_PADDING_ROWS
from properties.result import NO_VALID_ROWS

pytestmark = pytest.mark.multiproc

#: Every check the gate makes on the CPU with a correct implementation (made, not only skipped): a check that stops
#: running -- a family's condition inverted, a check dropped from a list, a clause left unread -- leaves its name out
#: and fails this test (a silent pass otherwise: no mutant can fail a check that never runs).
EXPECTED = expected_checks("cpu")
#: What only a GPU makes: on the CPU each is skipped with its reason, never passed.
GPU_ONLY = {"capacity_rejected_in_capture"}  # (the other CUDA-only checks' families skip whole on the CPU)


def _nothing_to_compare(check: dict) -> bool:
    """A check skipped where its rank has nothing to compare: no padding rows (a full shard), no valid row."""
    return check["skipped"] and check["detail"] in (NO_PADDING_ROWS, NO_VALID_ROWS)


def test_every_family_runs_every_property_on_cpu():
    pool = RankPool(PoolSpec(impl="unfused", world_size=3))
    base = dict(seed=3, N=64, K=64, max_M=512)
    cases = [
        Case("compute", ms=[3, 129, 7], kind="exact", late_rank=1, delay_ms=20, batch_m=65, autograd="rotate",
             layout=[[0, 2]], **base),
        Case("compute", ms=[100, 5], kind="nonfinite", out="none", batch_m=9, **base),
        Case("instances", 5, 64, 64, 8192, [300, 5, 129], "exact", repeat=1, shapes=[[128, 64, 512]],
             order=[0, 1, 0], recreate=[[64, 128, 256]]),
        Case("dispatch", 6, 64, 64, 8192, [127, 128, 127], "exact", out="none"),
    ]
    cases += [Case("capacity", ms=[5], bad=b, **base) for b in CAPACITY_BADS]
    cases += [Case("bad_call", ms=[9], bad=b, **base) for b in sorted(BAD_CALLS)]
    seen, skipped_only, bads = set(), set(), set()
    try:
        for case in cases:
            report = pool.run(case)
            assert report.passed, report.render()
            seen |= {c["name"] for _, c in report.checks() if c["passed"]}  # made, not only skipped
            skipped_only |= {c["name"] for c in report.skipped_checks()}
            if case.family == "capacity":  # no capture on the CPU: skipped with the reason, never passed
                assert {(c["name"], "no CUDA graphs" in c["detail"]) for c in report.skipped_checks()
                        if not _nothing_to_compare(c)} == {("capacity_rejected_in_capture", True)}
            bads |= {c["extra"].get("bad") for _, c in report.checks() if c["extra"].get("bad")}
        graph = pool.run(Case("graph", ms=[5], **base))
    finally:
        pool.close()
    assert seen == EXPECTED, f"never ran: {sorted(EXPECTED - seen)}; not listed here: {sorted(seen - EXPECTED)}"
    assert GPU_ONLY <= skipped_only and not GPU_ONLY & seen
    assert bads == set(BAD_CALLS) | set(CAPACITY_BADS)
    # On CPU the graph family is reported as skipped, with its reason, never as passed.
    assert graph.status == Status.SKIPPED and "CUDA graphs" in graph.note


def test_waived_clauses_are_skipped_with_their_reason_and_the_rest_is_checked():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:AdapterStyleNoOut", world_size=2))
    base = dict(seed=4, N=64, K=64, max_M=512)
    try:
        compute = pool.run(Case("compute", ms=[129, 5], kind="exact", **base))
        capacity = pool.run(Case("capacity", ms=[5], bad="over", **base))
        bad = pool.run(Case("bad_call", ms=[9], bad="all", **base))
    finally:
        pool.close()
    assert compute.passed, compute.render()
    skipped = {c["name"]: c["detail"] for c in compute.skipped_checks()}
    assert "allocates its own output" in skipped["padded_rows_untouched"]
    assert "allocates its own output" in skipped["returns_out"]
    assert {"within_tolerance", "bitwise_equal", "repeatable", "fresh_per_call"} <= compute.property_names()
    assert capacity.status == Status.SKIPPED and "no capacity bound" in capacity.note
    assert bad.passed, bad.render()  # library errors accepted as clear errors
    assert any(c["skipped"] and "out_dtype" in c["detail"] for c in bad.skipped_checks())


def test_unaligned_m_waiver_skips_only_the_unaligned_calls():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:UnalignedMRejected", world_size=2))
    try:
        report = pool.run(Case("compute", seed=1, N=64, K=64, max_M=512, ms=[129, 128]))
        # It rejects unaligned M before anything else: bad calls and capacity cases must reach it with an
        # aligned M, or every rejection would be for the wrong reason (ShapeError instead of DTypeError...).
        bad = pool.run(Case("bad_call", seed=2, N=64, K=64, max_M=512, ms=[3], bad="all"))
        over = pool.run(Case("capacity", seed=3, N=64, K=64, max_M=511, ms=[5], bad="over"))
    finally:
        pool.close()
    assert bad.passed, bad.render()
    assert {c["extra"]["M"] for _, c in bad.checks() if c["name"] == "bad_call_rejected"} == {4}
    assert over.passed, over.render()
    assert report.passed, report.render()
    assert [c["name"] for c in report.skipped_checks() if not _nothing_to_compare(c)] == ["unaligned_m"] * 2
    assert {c["extra"]["M"] for _, c in report.checks() if c["name"] == "within_tolerance"} == {128}


@pytest.mark.parametrize("impl, right", [("mutants.catalogue:NonContiguousXHandled", True),
                                         ("mutants.catalogue:NonContiguousXReadWrongly", False)])
def test_an_accepted_bad_call_says_whether_its_result_is_right(impl, right):
    pool = RankPool(PoolSpec(impl=impl, world_size=2))
    try:
        report = pool.run(Case("bad_call", seed=5, N=64, K=64, max_M=512, ms=[33], bad="x_noncontiguous"))
    finally:
        pool.close()
    assert report.status == Status.FAILED, report.render()  # accepted: a violation either way
    checks = [c for _, c in report.checks() if c["name"] == "bad_call_rejected"]
    assert len(checks) == 2  # one per rank
    for c in checks:
        assert c["extra"]["accepted_result_correct"] is right
        assert c["detail"].startswith("bad call x_noncontiguous ("), c["detail"]  # which bad call, in the failure
        assert ("its result is right" if right else "its result is WRONG") in c["detail"]


def test_aligned_m_for_a_waiving_implementation_stays_within_capacity():
    from fuzz.execute import aligned_if_waived
    from mutants.catalogue import AdapterStyleNoOut, UnalignedMRejected

    assert aligned_if_waived(AdapterStyleNoOut, 3, 2, 511) == 3  # no waiver: M as drawn
    assert [aligned_if_waived(UnalignedMRejected, m, 3, 1024) for m in (1, 4, 6, 1024)] == [3, 6, 6, 1023]
    assert aligned_if_waived(UnalignedMRejected, 1025, 3) == 1026  # "over" stays over capacity


def test_graph_family_captures_both_sides_of_one_path_switch_per_case():
    """The graph family's Ms: the drawn M, both sides of ``should_run``'s crossover and of one of the kernel's
    path switches, picked by the case's seed (so the cases of a run cover every switch), capped at MAX_GRAPHS;
    an implementation without ``path_switches`` adds none."""
    import torch

    from fuzz.case import Case
    from fuzz.families.graph import MAX_GRAPHS, graph_ms

    class Impl:
        waived_clauses = {}

        def should_run(self, x):
            return x.shape[0] >= 300

        def can_run(self, w):
            return True

        def path_switches(self, max_M):
            return (65, 129, 513)

    class Ctx:
        world_size, device = 2, torch.device("cpu")

        def w(self, case, seed):
            return None

        def gather(self, mine):
            return {0: mine, 1: mine}

    seen = set()
    for seed in range(3):
        case = Case("graph", seed, 64, 64, 1024, [1000], "gaussian", "guarded")
        ms = graph_ms(Ctx(), Impl(), case)
        switch = (65, 129, 513)[seed % 3]
        assert ms[0] == 1000 and {299, 300, switch - 1, switch} <= set(ms) and len(ms) <= MAX_GRAPHS, ms
        seen.add(switch)
    assert seen == {65, 129, 513}
    plain = Impl()
    plain.path_switches = None
    assert set(graph_ms(Ctx(), plain, Case("graph", 0, 64, 64, 1024, [1000], "gaussian", "guarded"))) == {
        1000, 299, 300}


def test_the_held_instances_guards_are_checked_again_at_the_cases_end():
    """After the case's GPU work (run_case waits first): every held instance's guard regions once more (a write
    that landed after the per-call checks read them shows in the case that made it); a changed word fails,
    instances without guard regions add nothing."""
    import torch

    from fuzz.families import settled_guards

    pattern = torch.arange(16, dtype=torch.int16)

    class Impl:
        def __init__(self, now):
            self.now = now

        def guard_regions(self):
            return {"after the flags": (self.now, pattern)} if self.now is not None else {}

    late = pattern.clone()
    late[5] += 1

    class Ctx:
        rank, device = 1, torch.device("cpu")

        def held_impls(self):
            return {"instance A": Impl(pattern.clone()), "instance B": Impl(late), "no guards": Impl(None)}

    checks = settled_guards(Ctx())
    assert [c.name for c in checks] == ["guard_regions_untouched"]  # one check, one read-back for every instance
    (hit,) = checks
    assert not hit.passed and hit.rank == 1 and hit.extra["when"] == "case end"
    assert "instance B: after the flags" in hit.detail and "1 of 16" in hit.detail and hit.total == 32

    Ctx.held_impls = lambda self: {"instance A": Impl(pattern.clone()), "no guards": Impl(None)}
    (intact,) = settled_guards(Ctx())
    assert intact.passed and intact.total == 16 and intact.extra["when"] == "case end"
    Ctx.held_impls = lambda self: {"no guards": Impl(None)}
    assert settled_guards(Ctx()) == []


def test_a_ranks_error_names_the_kernels_its_calls_were_to_run():
    """Every call a rank begins goes on the case's trail with the kernel path the implementation says it takes
    (``path_table``, where it has one); a rank's error carries the trail (fuzz/rank_worker.py), so ranks whose
    calls ran different kernels -- and waited for each other until a trap -- show it side by side."""
    import torch

    from fuzz.families.calls import CallRaised, CaseCalls

    class Impl:
        main_path, N, device = "fused", 4, torch.device("cpu")
        last_path = None

        def expected_path(self, x, w):
            return ("fused", "") if x.shape[0] > 1 else ("unfused", "M = 1: below the crossover")

        def path_table(self):
            if self.broken:
                raise ValueError("no tile config")
            return ((1, "pull 64x112"), (193, "pull 64x112c2"))

        def state_tensors(self):
            return {}

        def __call__(self, x, w, out=None):
            self.last_path = self.expected_path(x, w)[0]
            if x.shape[0] == 5:
                raise RuntimeError("planted")
            return torch.zeros(x.shape[0], self.N, dtype=torch.bfloat16)

    calls, impl, w = CaseCalls(1, 2), Impl(), torch.zeros(4, 4)
    impl.broken = False
    for M in (200, 1):
        calls.call(impl, torch.zeros(M, 4), w, tag=f"call{M}")
    impl.broken = True
    calls.call(impl, torch.zeros(3, 4), w, tag="call3")
    impl.broken = False
    with pytest.raises(CallRaised):
        calls.call(impl, torch.zeros(5, 4), w, tag="late", captured=True)
    assert calls.trail == [
        "call200 M=200 group rank 1/2 expected path fused (kernel path pull 64x112c2)",
        "call1 M=1 group rank 1/2 expected path unfused",
        "call3 M=3 group rank 1/2 expected path fused (kernel path unknown: ValueError: no tile config)",
        "late M=5 group rank 1/2 captured expected path fused (kernel path pull 64x112)",
    ]
    text = calls.trail_text(last=2)
    assert text.startswith("calls this rank began in the case (the last 2 of 4):")
    assert "call3 M=3" in text and "late M=5" in text and "call200" not in text


def test_every_instance_built_has_its_path_table_compared_across_the_group(monkeypatch):
    """RankContext.new_impl gathers the new instance's path_table from every rank of the group (one collective
    after the construction) and records kernel_paths_agree_across_ranks in the case; an implementation without
    tables adds nothing; a path_table that raises is still gathered (the peers must not wait) and fails."""
    import torch

    from fuzz.families.context import RankContext

    ours = ((1, "pull 64x112"), (193, "pull 64x112c2"))
    theirs = ((1, "pull 64x112"), (193, "pull 64x128"))

    class Impl:
        table = ours

        def __init__(self, group, **kw):
            pass

        def path_table(self):
            if isinstance(self.table, Exception):
                raise self.table
            return self.table

    gathered = []

    def gather(self, answer):
        gathered.append(answer)
        return {0: answer, 1: peer[0]}

    monkeypatch.setattr(RankContext, "gather", gather)
    ctx = RankContext(Impl, rank=0, world_size=2, device=torch.device("cpu"))
    ctx.begin_case()
    peer = [ours]
    ctx.new_impl(512, 2560, 8192)
    peer[0] = theirs
    ctx.new_impl(512, 2560, 8192)
    Impl.table = ValueError("no tile configs yet")
    ctx.new_impl(64, 64, 64)
    agree, differ, raised = ctx.calls.checks
    assert agree.passed and agree.name == "kernel_paths_agree_across_ranks" and agree.extra["call"] == "construction"
    assert not differ.passed and differ.extra["first_difference"] == "M=193" and "N=2560 K=8192" in differ.detail
    assert not raised.passed and "path_table() raised ValueError: no tile configs yet" in raised.detail
    assert gathered[-1] == "path_table() raised ValueError: no tile configs yet"

    Impl.table, peer[0] = None, None  # no claim anywhere: gathered, nothing recorded
    ctx.new_impl(64, 64, 64)
    assert len(ctx.calls.checks) == 3 and len(gathered) == 4


def test_the_path_gather_is_skipped_together_where_the_class_claims_nothing():
    """No collective at construction for an implementation whose class keeps the interface's path_table (None on
    every rank: the decision is the class's, the same on every rank); the fused kernel and any class that
    overrides it are gathered."""
    from fuzz.families.context import states_paths
    from kernel.fused import FusedGemmRs
    from kernel.unfused import UnfusedGemmRs
    from mutants.catalogue import PathByLocalRows

    assert not states_paths(object.__new__(UnfusedGemmRs)) and not states_paths(object())
    assert states_paths(object.__new__(FusedGemmRs)) and states_paths(object.__new__(PathByLocalRows))
