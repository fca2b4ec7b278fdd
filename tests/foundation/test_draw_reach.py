"""What the draws reach (the third planted-bug audit's survivors, 34th session): each edge the strategies name is
drawn -- the M edges of a shard, a tile and the capacity, the late rank's last rank and its longest delay, shapes
below a K tile, strided TP layouts --; the gate's ``ci`` profile is Hypothesis's derandomized one; the bad-call
table's layout entries apply from the first operand size at which the view is not dense; and the instances family
calls the instance its order names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from _in_process import run_on_one_cpu_rank
from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as hsettings

from fuzz import settings as gate_settings
from fuzz.bad_calls import BAD_CALLS, GoodCall
from fuzz.case import Case
from fuzz.layouts import layouts_for
from fuzz.strategies import (
    DRAWN_DELAYS_MS,
    SHAPES,
    boundary_ms,
    compute_cases,
    shapes,
    shard_boundary_ms,
)
from kernel.unfused import UnfusedGemmRs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIND = hsettings(max_examples=3000, database=None, phases=[Phase.generate], deadline=None,
                 suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("W", range(1, 17))
@pytest.mark.parametrize("max_M", [1, 2, 64, 300, 8192])
def test_boundary_ms_hold_every_named_edge_within_capacity(W, max_M):
    edges = {1, W - 1, W, W + 1, 2 * W - 1,            # a shard's rows: none, one, partly filled
             127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4097, 8191,  # tile and block edges
             max_M - 1, max_M}                          # the capacity
    got = boundary_ms(W, max_M)
    assert set(got) == {m for m in edges if 1 <= m <= max_M}, (W, max_M, got)
    assert len(got) == len(set(got))


@pytest.mark.parametrize("W", range(2, 17))
def test_shard_boundary_ms_hold_the_empty_rank_edges_and_come_back(W):
    ms = shard_boundary_ms(W)
    assert {W + 1, 2 * W + 1, 2 * W - 1, 3 * W + 1} <= set(ms), ms  # S = 2, 3 with ranks holding none or part
    assert ms[-1] == W + 1 and ms.index(W + 1) < len(ms) - 1, ms  # W + 1 again after the largest: a stale row


def test_the_drawn_late_rank_delays_reach_past_a_loaded_hosts_jitter():
    assert 0 in DRAWN_DELAYS_MS and min(d for d in DRAWN_DELAYS_MS if d) <= 5, DRAWN_DELAYS_MS
    assert max(DRAWN_DELAYS_MS) >= 100, DRAWN_DELAYS_MS  # a skew-dependent bug shows for sure


@pytest.mark.parametrize("W", [2, 4])
def test_every_rank_is_drawn_as_the_late_one(W):
    for rank in range(W):
        case = find(compute_cases(W), lambda c, r=rank: c.late_rank == r and c.layout is None, settings=FIND)
        assert case.late_rank == rank


def test_tail_shapes_reach_below_a_k_tile_and_below_8_columns():
    listed = set(map(tuple, SHAPES["cpu"]))
    for name, below in (("K < 64", lambda nk: nk[1] < 64), ("N < 64", lambda nk: nk[0] < 64),
                        ("K odd", lambda nk: nk[1] % 2 == 1), ("N < 8", lambda nk: nk[0] < 8)):
        nk = find(shapes("cpu"), lambda nk, b=below: b(nk) and tuple(nk) not in listed, settings=FIND)
        assert below(nk), name


@pytest.mark.parametrize("W", [4, 6, 8, 16])
def test_strided_tp_groups_are_drawn_for_every_tp_above_one(W):
    got = layouts_for(W)
    for tp in (d for d in range(2, W) if W % d == 0):
        dp = W // tp
        assert [list(range(g, W, dp)) for g in range(dp)] in got, (W, tp, got)  # e.g. W = 4: [[0, 2], [1, 3]]


def test_the_gate_profiles_map_to_the_hypothesis_profiles_they_promise():
    ci = hsettings.get_profile(gate_settings.GATE_PROFILES["ci"][0])
    assert gate_settings.GATE_PROFILES["ci"][1] is None  # the profile's own example count
    assert ci.derandomize and ci.database is None and ci.max_examples >= 25  # CI: the same examples every run
    smoke = gate_settings.GATE_PROFILES["smoke"]
    assert hsettings.get_profile(smoke[0]).derandomize and int(smoke[1]) >= 1
    nightly = hsettings.get_profile(gate_settings.GATE_PROFILES["nightly"][0])
    assert not nightly.derandomize and nightly.database is not None and nightly.max_examples >= 400
    assert Phase.reuse in nightly.phases and Phase.shrink in nightly.phases  # stored failures first, then shrunk
    assert set(gate_settings.GATE_PROFILES) == {"smoke", "ci", "nightly"}


_PROFILES = """
from hypothesis import settings
import fuzz.settings
for name in ("ci", "dev", "nightly", "replay"):
    p = settings.get_profile(name)
    print(name, p.derandomize, p.database is not None, p.max_examples)
"""


@pytest.mark.parametrize("ci_env", [{}, {"CI": "true"}, {"GITHUB_ACTIONS": "true"}, {"GITLAB_CI": "1"}])
def test_the_profiles_are_the_same_on_a_ci_runner(ci_env):
    """Hypothesis loads its own ``ci`` profile (derandomized, no database) as the default where it detects a CI
    runner; a profile that inherits the loaded default would make every nightly run on a CI runner draw the same
    examples (the project's CI sets ``CI``: stop 49 failed on exactly this). A fresh interpreter, since the
    detection happens when hypothesis is imported."""
    detected = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "TF_BUILD", "BUILDKITE", "CIRCLECI", "CIRRUS_CI",
                "CODEBUILD_BUILD_ID", "HEROKU_TEST_RUN_ID", "TEAMCITY_VERSION", "bamboo.buildKey", "HYPOTHESIS_PROFILE")
    env = {k: v for k, v in os.environ.items() if k not in detected}
    env.update(ci_env)
    got = subprocess.run([sys.executable, "-c", _PROFILES], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    rows = {line.split()[0]: line.split()[1:] for line in got.stdout.splitlines()}
    assert rows == {"ci": ["True", "False", "25"], "dev": ["False", "True", "15"],
                    "nightly": ["False", "True", "400"], "replay": ["False", "True", "25"]}, (ci_env, rows)


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_the_layout_entries_apply_exactly_where_the_view_is_not_dense(rows):
    """A row-strided or expanded view of one row is dense (a valid call); from two rows it is not (a bad call the
    table must make, at the smallest M, N or S it exists)."""
    x = torch.zeros(rows, 16, dtype=torch.bfloat16)
    w = torch.zeros(rows, 16, dtype=torch.bfloat16)
    out = torch.zeros(rows, rows, dtype=torch.bfloat16)
    g = GoodCall(x, w, out, max_M=rows, over_M=rows + 1)
    S = rows
    for name, operand in (("x_row_strided", 0), ("w_row_strided", 1), ("out_row_strided", 2), ("w_expanded", 1)):
        entry = BAD_CALLS[name]
        made = entry.build(g, S)[operand]
        assert entry.applies(g, S) == (not made.is_contiguous()), (name, rows)


_CALLS: list[tuple[int, int, int]] = []


class _Recorded(UnfusedGemmRs):
    """The unfused implementation, every call's (N, K, M) recorded."""

    name = "test-recorded"

    def _run(self, x, w, out, M):
        _CALLS.append((self.N, self.K, M))
        return super()._run(x, w, out, M)


def test_the_instances_family_calls_the_instance_its_order_names():
    _CALLS.clear()
    shapes_ = [[128, 32, 512], [32, 96, 256]]
    case = Case("instances", 5, 64, 64, 8192, [300, 5, 129, 7, 40, 3], "exact", repeat=1, shapes=shapes_,
                order=[2, 0, 1, 1, 2, 0])
    checks = run_on_one_cpu_rank(_Recorded, case)
    assert not [c for c in checks if not c.passed and not c.skipped], [c.render() for c in checks if not c.passed]
    dims = [(64, 64, 8192)] + [tuple(s) for s in shapes_]  # (N, K, max_M) of instance 0 (the pool's), 1, 2
    want = [(dims[which][0], dims[which][1], min(M, dims[which][2])) for M, which in zip(case.ms, case.order)]
    got = _CALLS[:len(want)]  # (an M past an instance's capacity is taken at its capacity)
    assert got == want, (got, want)
