"""The seeded input generator (oracle/inputs.py): tensors read from one fixed value table at a hashed offset,
times random column signs and the kind's scale. What the suite relies on: every argument changes the tensor,
any row range is the whole tensor's rows, reads past the table's end wrap, the values have the kind's
distribution, and a GPU builds the same bits as the host (a case found on a GPU replays on the CPU)."""

from __future__ import annotations

import pytest
import torch

import oracle.inputs as inputs
from oracle import make_w, make_x
from oracle.truth import seeded_rows

KINDS_DENSE = ("gaussian", "small", "large", "skewed", "nonfinite")


@pytest.mark.parametrize("kind", inputs.KINDS)
def test_any_row_range_is_the_whole_tensors_rows(kind):
    whole = make_x(7, 1, 300, 96, 4, kind)
    for rows in [(0, 1), (63, 65), (100, 257), (299, 300), (0, 300)]:
        part = make_x(7, 1, 300, 96, 4, kind, rows=rows)
        assert torch.equal(part.view(torch.int16), whole[rows[0]:rows[1]].view(torch.int16)), (kind, rows)


@pytest.mark.parametrize("kind", [k for k in inputs.KINDS if k != "zeros"])
def test_every_argument_changes_the_tensor(kind):
    base = make_w(3, 0, 64, 128, 4, kind)
    for other in (make_w(4, 0, 64, 128, 4, kind), make_w(3, 1, 64, 128, 4, kind)):
        assert not torch.equal(base, other)
    x = make_x(3, 0, 64, 128, 4, kind)
    assert not torch.equal(x, make_x(4, 0, 64, 128, 4, kind))
    assert not torch.equal(x, make_x(3, 1, 64, 128, 4, kind))
    if kind != "exact":  # x and w of one (seed, rank) are different reads of the table
        assert not torch.equal(x.float().abs().sum(), base.float().abs().sum())


def test_the_same_arguments_give_the_same_bits_and_a_fresh_w():
    a, b = make_w(9, 2, 80, 64, 4), make_w(9, 2, 80, 64, 4)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    a.zero_()  # make_w's tensor is the caller's: writing it leaves the next one whole
    assert make_w(9, 2, 80, 64, 4).abs().sum() > 0


def test_reads_past_the_tables_end_wrap_to_its_start():
    cpu = torch.device("cpu")
    tail = inputs._window("gauss", inputs.TABLE_LEN - 5, 5, cpu)
    head = inputs._window("gauss", 0, 7, cpu)
    both = inputs._window("gauss", inputs.TABLE_LEN - 5, 12, cpu)
    assert torch.equal(both, torch.cat([tail, head]))
    chunk_edge = inputs._window("gauss", inputs.TABLE_CHUNK - 3, 6, cpu)  # across two lazily drawn chunks
    assert torch.equal(chunk_edge[3:], inputs._window("gauss", inputs.TABLE_CHUNK, 3, cpu))
    assert len(torch.unique(chunk_edge)) == 6


def test_a_tensor_larger_than_the_table_reads_it_again_shifted_never_a_repeated_row():
    K = 4096  # a power of two: with a table of 2^24 values, row i + 4096 would equal row i
    M = inputs.TABLE_LEN // K + 4
    x = make_x(5, 0, M, K, 2, rows=(0, M)).float()
    flat = x.view(-1)
    t = torch.arange(0, 3 * K)
    # the element read L values later is the same table value, in another column: equal up to its sign
    assert torch.equal(flat[t + inputs.TABLE_LEN].abs(), flat[t].abs())
    for i in range(M - 4, M):
        for j in (0, 1, 2, i - inputs.TABLE_LEN // K):
            assert not torch.equal(x[i].abs(), x[j].abs()), (i, j)
    assert torch.isfinite(x).all()
    # built in pieces of TABLE_LEN // K rows (the whole), or in one (a few rows): the same bits
    step = inputs.TABLE_LEN // K
    for rows in [(M - 6, M), (step - 2, step + 2)]:
        assert torch.equal(make_x(5, 0, M, K, 2, rows=rows).float(), x[rows[0]:rows[1]])


@pytest.mark.parametrize("W", [2, 8, 16])
def test_exact_x_keeps_the_last_value_of_a_column_drawn_twice(W):
    """The exact kind's rows, rebuilt by a plain loop over the draws (the definition), equal make_x's."""
    M, K = 130, 32  # K small: columns drawn twice in most rows
    x = make_x(21, 1, M, K, W, "exact")
    expected = torch.zeros(M, K)
    nnz = min(K, inputs.exact_nnz(W))
    repeats = 0
    for b in range(-(-M // inputs.ROW_BLOCK)):
        rows = min(M, (b + 1) * inputs.ROW_BLOCK) - b * inputs.ROW_BLOCK
        g = inputs._gen(21, 1, f"x{b}")
        cols = torch.randint(0, K, (rows, nnz), generator=g)
        vals = torch.randint(1, 3, (rows, nnz), generator=g).float()
        vals *= torch.where(torch.rand(rows, nnz, generator=g) < 0.5, -1.0, 1.0)
        for i in range(rows):
            repeats += nnz - len(set(cols[i].tolist()))
            for j in range(nnz):
                expected[b * inputs.ROW_BLOCK + i, cols[i, j]] = vals[i, j]
    assert repeats > 0
    assert torch.equal(x.float(), expected)


def test_distributions_match_the_kinds():
    K = 512
    w = make_w(1, 0, 1024, K, 2).float()
    assert abs(w.mean().item()) < 2e-3 and abs(w.std().item() * K**0.5 - 1) < 0.02  # N(0, 1/K)
    x = make_x(1, 0, 1024, K, 2).float()
    assert abs(x.std().item() - 1) < 0.02  # N(0, 1)
    assert abs(make_x(1, 0, 256, K, 2, "small").float().std().item() * 2**10 - 1) < 0.02
    assert abs(make_x(1, 0, 256, K, 2, "large").float().std().item() / 2**50 - 1) < 0.02
    assert abs(make_x(1, 1, 256, K, 2, "skewed").float().std().item() * 2**12 - 1) < 0.02  # rank W - 1
    assert abs(make_x(1, 0, 256, K, 2, "skewed").float().std().item() - 1) < 0.02
    we = make_w(1, 0, 256, K, 2, "exact").float()
    assert set(we.unique().tolist()) == set(range(-3, 4))
    nf = make_x(1, 0, 64, K, 2, "nonfinite").float()
    assert int(torch.isnan(nf).sum()) == 1 and int(torch.isinf(nf).sum()) == 2


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, a NaN matching any NaN (its payload is no property of the inputs)."""
    a, b = a.cpu(), b.cpu()
    nan_a, nan_b = torch.isnan(a.float()), torch.isnan(b.float())
    return torch.equal(nan_a, nan_b) and torch.equal(a.view(torch.int16)[~nan_a], b.view(torch.int16)[~nan_b])


def test_same_bits_tells_one_bit_apart_and_not_a_nan_payload():
    a = make_x(2, 0, 8, 64, 2)
    b = a.clone()
    b.view(torch.int16)[3, 5] ^= 1
    assert _same_bits(a, a.clone()) and not _same_bits(a, b)
    c, d = a.clone(), a.clone()
    c.view(torch.int16)[0, 0] = 0x7FC0  # two NaNs, other payloads
    d.view(torch.int16)[0, 0] = 0x7FFF
    assert _same_bits(c, d) and not _same_bits(a, c)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", inputs.KINDS)
def test_the_device_builds_the_hosts_bits(kind):
    dev = torch.device("cuda")
    for rows in [(0, 300), (17, 200)]:
        host = make_x(11, 3, 300, 192, 4, kind, rows=rows)
        gpu = make_x(11, 3, 300, 192, 4, kind, rows=rows, device=dev)
        assert gpu.device.type == "cuda"
        assert _same_bits(host, gpu), (kind, rows)
    host_w, gpu_w = make_w(11, 3, 200, 192, 4, kind), make_w(11, 3, 200, 192, 4, kind, device=dev)
    assert _same_bits(host_w, gpu_w), kind
    for (xh, wh), (xg, wg) in zip(seeded_rows(11, kind, (5, 40), 300, 200, 192, 4),
                                  seeded_rows(11, kind, (5, 40), 300, 200, 192, 4, dev)):
        assert xg.device.type == wg.device.type == "cuda"
        assert _same_bits(xh, xg) and _same_bits(wh, wg)


@pytest.mark.parametrize("W", [1, 2, 3, 8])
def test_nonfinite_kind_has_a_nan_weight_on_one_rank_and_a_zero_row_on_every_rank(W):
    # a zero row of x times a NaN weight is NaN: a kernel that skips zero rows or sanitises w loses it
    for seed in range(4):
        for r in range(W):
            w = make_w(seed, r, 40, 96, W, "nonfinite")
            assert int(torch.isnan(w).sum()) == (1 if r == seed % W else 0)
            assert bool(torch.isfinite(w[~torch.isnan(w).any(1)]).all())
            x = make_x(seed, r, 37, 96, W, "nonfinite")
            zero = (x == 0).all(1)
            z = inputs.zero_row(seed, r, 37, 96)
            assert z is not None and bool(zero[z]) and int(zero.sum()) == 1
            assert int(torch.isnan(x).sum()) == 1 and int(torch.isinf(x).sum()) == 2
            assert torch.equal(make_x(seed, r, 37, 96, W, "nonfinite", rows=(z, z + 1)).view(torch.int16),
                               x[z : z + 1].view(torch.int16))


@pytest.mark.parametrize("W", [1, 2, 8])
def test_the_nonfinite_kind_plants_a_nan_a_plus_inf_and_a_minus_inf_in_every_ranks_x(W):
    # nonfinite_pattern_matches compares the classes of the non-finite values: a kernel that turns -Inf into +Inf (an
    # abs, a max with the wrong sign) shows only where the inputs hold both infinities
    for seed in range(4):
        for r in range(W):
            x = make_x(seed, r, 37, 96, W, "nonfinite").float()
            assert int(torch.isnan(x).sum()) == 1, (seed, r)
            assert int((x == float("inf")).sum()) == 1 and int((x == float("-inf")).sum()) == 1, (seed, r)


@pytest.mark.parametrize("M", [2, 3, 4, 5])
def test_the_nonfinite_zero_row_is_there_whenever_a_row_holds_no_planted_value(M):
    K = 4  # few rows and columns: the planted values often take all rows but one, and that one is the zero row
    for seed in range(32):
        for r in range(2):
            taken = {flat // K for flat in inputs._nonfinite_picks(seed, r, M, K)}
            z = inputs.zero_row(seed, r, M, K)
            if len(taken) == M:
                assert z is None
                continue
            assert z is not None and z not in taken, (seed, r, z, taken)
            assert bool((make_x(seed, r, M, K, 2, "nonfinite")[z] == 0).all()), (seed, r, z)


@pytest.mark.parametrize("kind", ["gaussian", "small", "large", "skewed", "nonfinite"])
def test_x_and_w_of_one_rank_are_independent_draws(kind):
    # w read from x's place in the table (x's rows times 1/sqrt(K)) would make every partial's diagonal a sum of
    # squares: a bias no real layer has, and a kernel mixing up its x and w rows would not show
    N, K = 64, 128
    x = make_x(6, 1, N, K, 4, kind).double()  # fp64: the large kind's squares overflow fp32
    w = make_w(6, 1, N, K, 4, kind).double()
    finite = torch.isfinite(x) & torch.isfinite(w)
    xs, ws = x[finite], w[finite]
    corr = float((xs * ws).mean() / (xs.square().mean() * ws.square().mean()).sqrt())
    assert abs(corr) < 0.06, (kind, corr)


def test_inputs_are_rebuilt_bit_for_bit_whatever_the_global_random_state():
    # the table comes from its own seeds: a rank, the driver and a REPRO line's fresh process build the same bits
    # whatever else drew from torch's global generator before them (and in whatever order chunks were first read)
    def build():
        return [(make_x(8, 1, 70, 200, 4, kind), make_w(8, 1, 40, 200, 4, kind)) for kind in inputs.KINDS]

    before = build()
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        torch.randn(1000)
        inputs._host_chunk.cache_clear()
        inputs._make_w_cached.cache_clear()
        inputs._window("gauss", 5 * inputs.TABLE_CHUNK, 3, torch.device("cpu"))  # another chunk drawn first
        after = build()
    for kind, (xb, wb), (xa, wa) in zip(inputs.KINDS, before, after):
        assert _same_bits(xb, xa) and _same_bits(wb, wa), kind


def test_no_two_rows_of_a_tensor_repeat_within_the_table():
    # K = 4096 and 300 rows: 1.2M values, past one chunk of the table -- a table whose chunks repeat (2^20 values)
    # would give rows 0 and 256 the same values, and a row-aliasing bug would read an identical row
    x = make_x(5, 0, 300, 4096, 2).float().abs()
    assert len(torch.unique(x, dim=0)) == 300
    assert not torch.equal(inputs._host_chunk("gauss", 0)[:64], inputs._host_chunk("gauss", 1)[:64])


@pytest.mark.parametrize("kind", inputs.KINDS)
def test_the_truths_shared_weights_are_each_ranks_own(kind):
    # the truth reads every rank's w through shared_w (the host's cached tensor): rank r's, never another's
    for r in range(3):
        assert _same_bits(inputs.shared_w(4, r, 24, 40, 3, kind), make_w(4, r, 24, 40, 3, kind)), (kind, r)


@pytest.mark.parametrize("W", [2, 4])
def test_the_nonfinite_kinds_planted_values_sit_at_other_places_on_every_rank(W):
    # at the same places on every rank the ranks' NaN / Inf fall on the same rows of the result: a kernel dropping a
    # rank's contribution would leave the pattern as it was (the other ranks bring the same values to those rows)
    for seed in range(4):
        places = [frozenset(map(tuple, (~torch.isfinite(make_x(seed, r, 37, 96, W, "nonfinite").float())).nonzero()
                                .tolist())) for r in range(W)]
        assert all(len(p) == 3 for p in places) and len(set(places)) == W, (seed, places)
        assert len({row for p in places for row, _ in p}) > 3, (seed, places)  # not one row for every rank either
