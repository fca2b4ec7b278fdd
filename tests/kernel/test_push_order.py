"""The push kernel's tile order (``kernel/fused/push_order.py``), the deadlock-freedom argument of its design
record, checked exhaustively on the CPU, and the order the kernel traces (CuTe DSL ``Int32`` arithmetic,
evaluated on the host) equal to the one checked.

Verification model:
  1. every position maps to one tile, every tile to one position (``tile_at`` is a bijection), for W = 2..16,
     tiles per shard 1..29, grids from 1 to more than the tiles, leads 0, 1, one wave, everything;
  2. own tile k comes after every push of round k (the waits of the smallest stuck position are for pushes
     at smaller positions: the induction of the design record);
  3. a CTA's positions increase (it runs them in order), and the CTAs' slots cover every position once;
  4. ``push_first`` is the first iteration's order (pushes in order, then own tiles in order), and the
     interleaved order keeps own tiles a wave behind the pushes of their round (the lag the overlap needs);
  5. the kernel's traced arithmetic gives the same (position, step, tile) as the Python evaluation.
"""

import os
import subprocess
import sys

import pytest

from kernel.fused import cutlass_available
from kernel.fused.push_order import slot_position, tile_at

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def order(W, T, lead):
    """{(step, k): position} over the W*T positions."""
    return {tile_at(pos, T, W, lead): pos for pos in range(W * T)}


def grids(W, T):
    return sorted({min(g, W * T) for g in (1, 2, 3, W, 7, 13, 64, 131, 132, W * T)})


@pytest.mark.parametrize("W", range(2, 17))
def test_every_position_is_one_tile_and_own_tiles_follow_their_pushes(W):
    for T in range(1, 30):
        for lead in sorted({0, 1, W - 1, 13, 132, (W - 1) * T, 10**6}):
            pos_of = order(W, T, lead)
            assert len(pos_of) == W * T and all(0 <= s < W and 0 <= k < T for s, k in pos_of), (W, T, lead)
            for k in range(T):
                own = pos_of[(W - 1, k)]
                assert all(pos_of[(s, k)] < own for s in range(W - 1)), (W, T, lead, k)


@pytest.mark.parametrize("W", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("rotate", [True, False])
def test_a_cta_runs_increasing_positions_and_the_ctas_cover_every_position(W, rotate):
    for T in range(1, 30):
        total = W * T
        for G in grids(W, T):
            covered = []
            for b in range(G):
                mine = [slot_position(slot, G, total, rotate) for slot in range(b, total, G)]
                assert mine == sorted(mine) and len(set(mine)) == len(mine), (W, T, G, b)
                covered += mine
            assert sorted(covered) == list(range(total)), (W, T, G)


def test_push_first_is_pushes_in_order_then_own_tiles():
    for W in (2, 4, 16):
        for T in (1, 5, 28):
            P = (W - 1) * T
            for pos in range(W * T):
                step, k = tile_at(pos, T, W, W * T)
                expect = (pos % (W - 1), pos // (W - 1)) if pos < P else (W - 1, pos - P)
                assert (step, k) == expect, (W, T, pos)


@pytest.mark.parametrize("W,T", [(2, 896), (2, 200), (4, 448), (8, 224), (16, 112)])
def test_interleaved_order_keeps_own_tiles_a_wave_behind_their_pushes(W, T):
    """Lead = G = 132: own tile k waits for pushes issued at least a wave (G positions) earlier, except the
    last ~G/(W-1) own tiles, which come after the last pushes; and pushes are spread over the call: every
    window of 2G positions after the lead holds pushes."""
    G = 132
    pos_of = order(W, T, G)
    lags = [pos_of[(W - 1, k)] - max(pos_of[(s, k)] for s in range(W - 1)) for k in range(T)]
    tail = -(-G // (W - 1)) + W
    assert min(lags[: T - tail]) > G, (W, T, min(lags[: T - tail]))
    assert min(lags) >= 1
    kinds = [tile_at(pos, T, W, G)[0] for pos in range(W * T)]
    last_push = max(p for p, s in enumerate(kinds) if s < W - 1)
    assert W * T - 1 - last_push <= tail  # pushes go on until the end of the call, not (W-1)/W of it
    for start in range(G, last_push - 2 * G, G):
        assert any(s < W - 1 for s in kinds[start : start + 2 * G])
        assert any(s == W - 1 for s in kinds[start : start + 2 * G])


def test_rotation_alternates_a_ctas_kinds_when_the_grid_is_a_multiple_of_w():
    W, T, G = 2, 896, 132
    kinds = {b: [tile_at(slot_position(s, G, W * T, True), T, W, G)[0] for s in range(b, W * T, G)] for b in range(G)}
    assert all(len(set(k[1:])) == 2 for k in kinds.values())  # after the lead wave, both kinds
    unrotated = {b: {tile_at(s, T, W, G)[0] for s in range(b + G, W * T, G)} for b in range(G)}
    assert any(len(k) == 1 for k in unrotated.values())  # what the rotation is for


_TRACE = r"""
import os, sys
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
import cutlass, cutlass.cute as cute
from cutlass import Int32
from kernel.fused import push_order
from kernel.fused.gemm_rs_push import _select

def dump_for(W):
    @cute.jit
    def dump(T: Int32, G: Int32, lead: Int32):
        total = T * W
        slot = Int32(0)
        while slot < total:
            pos = push_order.slot_position(slot, G, total, True, _select)
            step, k = push_order.tile_at(pos, T, W, lead, _select)
            cute.printf("%d %d %d %d", slot, pos, step, k)
            slot += 1
    return dump

for W, cases in ((2, ((5, 3, 3), (40, 7, 7), (3, 6, 6))), (4, ((9, 5, 5), (4, 16, 100))), (16, ((3, 11, 11),))):
    fn = cute.compile(dump_for(W), Int32(1), Int32(1), Int32(1), options="--gpu-arch sm_90a")
    for T, G, lead in cases:
        print(f"case {W} {T} {G} {lead}", flush=True)
        fn(Int32(T), Int32(G), Int32(lead))
        sys.stdout.flush()
"""


def _traced(script, source: str) -> dict[tuple, list[tuple]]:
    """``source`` written to ``script`` (CuTe DSL compiles functions whose source file it can read) and run: its
    ``case a b ...`` lines, each with the integer rows printed after it."""
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got, case = {}, None
    for line in res.stdout.splitlines():
        if line.startswith("case"):
            case = tuple(int(v) for v in line.split()[1:])
            got[case] = []
        else:
            got[case].append(tuple(int(v) for v in line.split()))
    return got


@pytest.mark.kernel
@pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed")
def test_the_traced_order_is_the_checked_order(tmp_path):
    """The kernel's arithmetic (Int32 //, %, select; run as host code by CuTe DSL) equals the Python one."""
    got, checked = _traced(tmp_path / "trace_push_order.py", _TRACE), 0
    assert len(got) == 6
    for (W, T, G, lead), rows in got.items():
        expect = []
        for slot in range(W * T):
            pos = slot_position(slot, G, W * T, True)
            expect.append((slot, pos, *tile_at(pos, T, W, lead)))
        assert rows == expect, (W, T, G, lead)
        checked += len(rows)
    assert checked == 2 * (5 + 40 + 3) + 4 * (9 + 4) + 16 * 3


_TRACE_OWNERS = r"""
import os, sys
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
import cutlass.cute as cute
from cutlass import Int32
from kernel.fused.gemm_rs_push import HopperGemmRsPushBF16
from kernel.fused.tiles import kernel_configs

def dump_for(W):
    kern = HopperGemmRsPushBF16(512, 256, kernel_configs("push", 132)[0], W)

    @cute.jit
    def dump(rank: Int32, mt: Int32, gdim: Int32):
        kern.bind_shape(Int32(512), Int32(256))
        total = W * mt * kern.num_n_tiles
        schedule = (Int32(0), mt, rank, None, None, gdim, total)
        slot = Int32(0)
        while slot < total:
            owner, j, n = kern.push_tile_coord(slot, schedule)
            cute.printf("%d %d %d %d", slot, owner, j, n)
            slot += 1
    return dump

for W in (2, 4):
    fn = cute.compile(dump_for(W), Int32(0), Int32(1), Int32(1), options="--gpu-arch sm_90a")
    for rank in range(W):
        print(f"case {W} {rank} {kernel_configs('push', 132)[0].tile_n}", flush=True)
        fn(Int32(rank), Int32(3), Int32(5))
        sys.stdout.flush()
"""


@pytest.mark.kernel
@pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed")
def test_the_kernel_pushes_step_s_to_rank_plus_one_plus_s_and_keeps_step_w_minus_1(tmp_path):
    """``push_tile_coord`` as traced (host-evaluated): the tile at slot ``s`` goes to owner ``(rank + 1 + step) % W``
    (``step`` of the checked order): step W-1 is the rank's own tile, so every own tile comes after the pushes of its
    round (the deadlock-freedom argument above), and each owner gets each of its shard's tiles once. An owner off by
    one (``rank + step``) swaps own tiles and pushes: a bijection still, in the order the argument excludes."""
    got = _traced(tmp_path / "trace_push_owners.py", _TRACE_OWNERS)
    assert sorted((W, rank) for W, rank, _ in got) == [(2, 0), (2, 1)] + [(4, r) for r in range(4)]
    mt, grid = 3, 5
    for (W, rank, tile_n), rows in got.items():
        per_shard = mt * -(-512 // tile_n)
        assert [row[0] for row in rows] == list(range(W * per_shard))
        for slot, owner, _, _ in rows:
            step, _ = tile_at(slot_position(slot, grid, W * per_shard, True), per_shard, W, grid)
            assert owner == (rank + 1 + step) % W, (W, rank, slot)
        for o in range(W):
            tiles = sorted((j, n) for _, owner, j, n in rows if owner == o)
            assert len(tiles) == len(set(tiles)) == per_shard, (W, rank, o)
