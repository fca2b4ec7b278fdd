"""What the driver makes of a case's outcome on the way to a reader, without ranks: a report's text holds every
rank's stacks and exceptions, and the coverage plot counts every case that did not pass or skip as a failure."""

from __future__ import annotations

from fuzz.case import Case, PoolSpec
from fuzz.plot import coverage, m_class
from fuzz.report import CaseReport
from fuzz.status import Status

SMALL = dict(seed=1, N=64, K=64, max_M=256)


def _report(status: Status, **kw) -> CaseReport:
    return CaseReport(case=Case("compute", ms=[5], **SMALL), spec=PoolSpec(impl="unfused", world_size=3),
                      status=status, **kw)


def test_a_hang_report_shows_the_stacks_of_every_rank():
    stacks = {r: f"Thread 0x1 (most recent call first):\n  File \"x.py\", line {r}, in where_rank_{r}_is"
              for r in range(3)}
    text = _report(Status.HANG, stacks=stacks, note="no result from rank(s) [1, 2]").render()
    for r in range(3):
        assert f"--- rank {r} stacks ---" in text, text
        assert f"where_rank_{r}_is" in text, text


def test_every_ranks_exception_is_in_the_report():
    ranks = {r: {"error": f"Traceback ...\nRuntimeError: rank {r} broke", "checks": []} for r in range(3)}
    text = _report(Status.ERROR, ranks=ranks).render()
    for r in range(3):
        assert f"rank {r} raised (harness error, nothing judged)" in text and f"rank {r} broke" in text, text


def _row(status: str, M: int = 5) -> dict:
    return {"impl": "unfused", "topology": "cpu", "world_size": 2, "status": status,
            "case": {"family": "compute", "ms": [M]}}


def test_the_coverage_plot_counts_a_hang_a_death_and_a_harness_error_as_failures():
    cls = m_class(5, 2)
    for status in (Status.FAILED, Status.HANG, Status.DIED, Status.ERROR):
        grid = coverage([_row(Status.PASSED.value), _row(status.value)])
        assert grid[("unfused", "cpu", 2)][cls] == [2, 1], (status, grid)
    for status in (Status.PASSED, Status.SKIPPED):
        assert coverage([_row(status.value)])[("unfused", "cpu", 2)][cls] == [1, 0], status


def test_a_skipped_check_is_not_rendered_as_a_failure():
    from properties.result import CheckResult

    failed = CheckResult("within_tolerance", False, rank=0, total=8, n_wrong=1, detail="planted: 1 element off")
    skipped = CheckResult("graph_replay", False, rank=0, skipped=True, detail="planted: CUDA graphs need a GPU")
    ranks = {0: {"error": None, "checks": [failed.to_json(), skipped.to_json()]}}
    text = _report(Status.FAILED, ranks=ranks).render()
    assert "planted: 1 element off" in text, text
    assert "graph_replay" not in text and "CUDA graphs need a GPU" not in text, text


class _DeadOrAlive:
    def __init__(self, pid: int, dead: bool):
        self.pid, self.dead = pid, dead

    def exited(self, timeout: float = 0.0) -> bool:
        return self.dead


def test_the_stacks_name_every_rank_of_the_node_a_dead_one_saying_it_gave_none(tmp_path):
    """fuzz/node.py ``read_stacks``: the ranks asked (the living) and the others (dead before the stack signal)
    alike -- a reader sees every rank, the dead one marked so, none left out."""
    from fuzz.node import LocalNode

    node = LocalNode(0, str(tmp_path))
    node.procs = {0: _DeadOrAlive(10, False), 1: _DeadOrAlive(11, True)}
    node.mark()
    (tmp_path / "rank0.stacks").write_text("Thread 0x1 (most recent call first):\n  File \"x.py\", in stuck_here\n")
    out = node.read_stacks([0])
    assert set(out) == {0, 1}, out
    assert "stuck_here" in out[0] and "no stack" in out[1], out


def test_the_coverage_plot_paints_a_failure_red_and_a_pass_green(tmp_path):
    """The PNG itself: a cell with a failing case red (#e53935), one with only passing cases green (#4caf50)."""
    import matplotlib.image

    from fuzz.plot import plot_coverage

    def has(img, rgb):
        target = [c / 255 for c in rgb]
        return any(all(abs(px[i] - target[i]) < 0.02 for i in range(3)) for row in img for px in row)

    for rows, red in (([_row(Status.PASSED.value, 5), _row(Status.FAILED.value, 300)], True),
                      ([_row(Status.PASSED.value, 5), _row(Status.PASSED.value, 300)], False)):
        path = tmp_path / f"coverage-{red}.png"
        assert plot_coverage(rows, str(path)) is None
        img = matplotlib.image.imread(str(path))
        assert has(img, (0x4C, 0xAF, 0x50))
        assert has(img, (0xE5, 0x39, 0x35)) == red
