"""The bias check (properties/bias.py) has teeth and no false alarms on what the gate draws (issue 15,
item 3). The 10,000-case measurement behind docs/NUMERICS.md is bench/bias_false_alarms.py; these tests
run its implementations on a few dozen gate-like cases:

1. the bound and the minimum count are the derived numbers, not magic ones;
2. every correct computation passes: fp32 sum of bf16 partials, the gloo bf16 chain, fp32 partials, a
   truncating (tensor-core-like) fp32 accumulation, the truth rounded to nearest;
3. each planted bias fails on the statistic it should, with a message that says which way;
4. exact and zero inputs, and shards too small to ever fail, are skipped with the reason — never passed;
   a non-finite result where the truth is finite fails;
5. the mutants BiasedRounding, ScaleError (here, W = 1, in process) and BiasedRoundingHalfAway (W = 2,
   gloo ranks) fail; the unfused implementation passes; all of them pass within_tolerance.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import BiasedRounding, ScaleError, bf16_half_away, bf16_toward_zero
from oracle import all_rank_inputs, shard_truth
from properties import within_tolerance
from properties.bias import (
    DEFAULT_FALSE_ALARM,
    bf16_ulp,
    bound,
    min_informative,
    no_systematic_bias,
    rounding_model,
    seeded_rounding_model,
)
from tests.bench_scripts import load_bench

HERE = Path(__file__).resolve().parent


def _bench():
    return load_bench("bias_false_alarms")


BENCH = _bench()
ALONG, SIGNED = "along the sign of the truth", "signed"


def _gate_like_cases(n: int, seed: int) -> list[dict]:
    """Cases drawn as the measurement draws them, every kind in turn, M capped so each case takes
    milliseconds; shards of at least 1000 elements, where a half-ulp bias cannot hide (z grows as sqrt(n))."""
    rng, cases = random.Random(seed), []
    while len(cases) < n:
        case = BENCH.draw_case(rng)
        case["M"] = min(case["M"], 64 * case["W"])
        case["kind"] = BENCH.KINDS[len(cases) % len(BENCH.KINDS)]
        sl = BENCH.shard_slice(case["M"], case["W"], case["rank"])
        if (sl.stop - sl.start) * case["N"] >= 1000:
            cases.append(case)
    return cases


CASES = _gate_like_cases(8, seed=15)


@pytest.fixture(scope="module")
def verdicts():
    out = []
    for case in CASES:
        inputs = all_rank_inputs(case["seed"], case["M"], case["N"], case["K"], case["W"], case["kind"])
        model = rounding_model(inputs, case["rank"], case["M"])
        sl = BENCH.shard_slice(case["M"], case["W"], case["rank"])
        results = BENCH.implementations([(x[sl], w) for x, w in inputs], case)
        results["truth_rounded_to_nearest"] = model.y.to(torch.bfloat16)
        out.append((case, {k: no_systematic_bias(y, model, rank=case["rank"]) for k, y in results.items()}))
    return out


def test_bound_is_derived_from_the_false_alarm_probability():
    # two statistics, two-sided, Hoeffding: 2 * 2 exp(-t^2 / 2) = p
    assert bound(1e-6) == pytest.approx(math.sqrt(2 * math.log(4e6)))
    assert 5.51 < bound(DEFAULT_FALSE_ALARM) < 5.52
    assert 4 * math.exp(-bound(1e-3) ** 2 / 2) == pytest.approx(1e-3)
    assert min_informative() == math.ceil(bound() ** 2) == 31  # |T / D| <= sqrt(n): below that it cannot fail
    with pytest.raises(ValueError):
        bound(0.0)


def test_bf16_ulp_is_the_spacing_of_bf16_numbers():
    v = torch.tensor([1.0, 1.99, -2.0, 0.75, 255.0, 256.0, 0.0, 2.0**-130], dtype=torch.float64)
    expected = [2.0**-7, 2.0**-7, 2.0**-6, 2.0**-8, 1.0, 2.0, 2.0**-133, 2.0**-133]
    assert bf16_ulp(v).tolist() == expected
    pos = v[v > 2.0**-126].bfloat16()
    next_up = (pos.view(torch.int16) + 1).view(torch.bfloat16).double()  # the next bf16 number up
    assert torch.equal(next_up - pos.double(), bf16_ulp(pos.double()))


def test_correct_computations_pass(verdicts):
    correct = (*BENCH.CORRECT, "truth_rounded_to_nearest")
    checked = 0
    for case, res in verdicts:
        for impl in correct:
            r = res[impl]
            assert not r.skipped, (case, r.render())
            assert r.passed, f"false alarm on {impl} {case}:\n{r.render()}"
            assert abs(r.extra["z_signed"]) < bound() and abs(r.extra["z_along_sign"]) < r.extra["limit_along_sign"]
            checked += 1
    assert checked == len(CASES) * len(correct)


@pytest.mark.parametrize("impl, statistic, direction", [
    ("truncate_final", ALONG, -1),
    ("scale_1-2^-9", ALONG, -1),
])
def test_half_ulp_biases_fail_every_case(verdicts, impl, statistic, direction):
    for case, res in verdicts:
        r = res[impl]
        assert not r.passed and not r.skipped, f"{impl} passed {case}:\n{r.render()}"
        key = "z_along_sign" if statistic == ALONG else "z_signed"
        assert direction * r.extra[key] > r.extra["limit_along_sign" if statistic == ALONG else "limit_signed"]
        assert "magnitudes shrink" in r.render() and "BIASED" in r.render()


def test_smaller_biases_point_the_right_way_when_caught(verdicts):
    """Ties away from zero, a 2^-12 scale, +1 ulp on 1% of the elements: a few hundredths of an ulp, caught
    once n is large enough (docs/NUMERICS.md's power table; next test). Where a small case catches one,
    the message must point the right way."""
    for impl, key, direction in (("ties_away_final", "z_along_sign", 1), ("scale_1-2^-12", "z_along_sign", -1),
                                 ("plus_1ulp_on_1pct", "z_signed", 1)):
        for case, res in verdicts:
            r = res[impl]
            if not r.passed:
                assert direction * r.extra[key] > 0, (impl, case, r.render())


@pytest.fixture(scope="module")
def large_shards():
    """W -> (model, results) for rank 0's shard of 65536 elements: M = 256 * W, (N, K) = (256, 128), a gate
    CPU shape; gaussian inputs."""
    out = {}
    for W in (1, 2):
        M, N, K = 256 * W, 256, 128
        case = {"seed": 3, "W": W, "N": N, "K": K, "M": M, "kind": "gaussian", "rank": 0}
        inputs = all_rank_inputs(3, M, N, K, W, "gaussian")
        out[W] = rounding_model(inputs, 0, M), BENCH.implementations([(x[:256], w) for x, w in inputs], case)
    return out


@pytest.mark.parametrize("W, impl, key, direction", [
    (2, "ties_away_final", "z_along_sign", 1),    # two bf16 partials of one binade often sum to a tie
    (2, "scale_1-2^-12", "z_along_sign", -1),
    (1, "scale_1-2^-12", "z_along_sign", -1),
    (1, "plus_1ulp_on_1pct", "z_signed", 1),
])
def test_small_biases_fail_on_a_large_shard(large_shards, W, impl, key, direction):
    model, results = large_shards[W]
    res = no_systematic_bias(results[impl], model, rank=0)
    assert not res.passed, res.render()
    limit = "limit_along_sign" if key == "z_along_sign" else "limit_signed"
    assert direction * res.extra[key] > res.extra[limit], res.render()


@pytest.mark.parametrize("W", [1, 2])
def test_correct_computations_pass_on_a_large_shard(large_shards, W):
    model, results = large_shards[W]
    for correct in BENCH.CORRECT:
        res = no_systematic_bias(results[correct], model, rank=0)
        assert res.passed and not res.skipped, res.render()


def test_ties_away_is_invisible_without_ties(large_shards):
    """At W = 1 the fp32 accumulator is rounded once: ties are rare (2^-16), and rounding them away from
    zero is no bias worth the name — the check must not cry wolf."""
    model, results = large_shards[1]
    assert no_systematic_bias(results["ties_away_final"], model, rank=0).passed


def test_plus_one_ulp_everywhere_is_a_signed_bias(large_shards):
    model, _ = large_shards[1]
    rne = model.y.to(torch.bfloat16)
    assert no_systematic_bias(rne, model, rank=0).passed
    up = (rne.double() + bf16_ulp(rne.double())).to(torch.bfloat16)
    res = no_systematic_bias(up, model, rank=0)
    assert not res.passed and res.extra["z_signed"] > res.extra["limit_signed"]
    assert "results too high" in res.render()
    assert res.extra["mean_ulp_signed"] == pytest.approx(1.0, abs=0.05)


def test_failure_renders_direction_size_and_bound(large_shards):
    model, results = large_shards[1]
    res = no_systematic_bias(results["truncate_final"], model, rank=0)
    text = res.render()
    assert text.startswith("[no_systematic_bias] rank 0: FAILED")
    assert "along the sign of the truth: z = -" in text and "magnitudes shrink" in text
    assert res.extra["mean_ulp_along_sign"] == pytest.approx(-0.5, abs=0.05)
    assert f"false-alarm probability of {DEFAULT_FALSE_ALARM:g}" in text
    assert "Mismatched elements" not in text  # a statistic, not an elementwise verdict


def test_rounding_helpers_round_the_way_their_names_say():
    t = torch.tensor([1 + 2**-8, -(1 + 2**-8), 1 + 3 * 2**-9, 1 + 2**-7 - 2**-20], dtype=torch.float32)
    assert bf16_toward_zero(t).tolist() == [1.0, -1.0, 1.0, 1.0]
    assert bf16_half_away(t).tolist() == [1 + 2**-7, -(1 + 2**-7), 1 + 2**-7, 1 + 2**-7]
    assert t.bfloat16().tolist() == [1.0, -1.0, 1 + 2**-7, 1 + 2**-7]  # RNE: the tie goes to even


@pytest.mark.parametrize("kind", ["exact", "zeros"])
def test_inputs_that_round_nothing_are_skipped_not_passed(kind):
    model = seeded_rounding_model(3, kind, 0, 64, 64, 64, 2)
    y = model.y.to(torch.bfloat16)
    res = no_systematic_bias(bf16_toward_zero(y.float()), model, rank=0)
    assert res.skipped and not res.passed
    assert "not applicable: 0 informative elements" in res.render()


def test_a_shard_too_small_to_fail_is_skipped():
    model = seeded_rounding_model(3, "gaussian", 1, 3, 10, 64, 2)  # rank 1 holds one row of 10 elements
    assert model.n_valid == 1
    res = no_systematic_bias(torch.zeros(2, 10, dtype=torch.bfloat16), model, rank=1)
    assert res.skipped and f"needs {min_informative()}" in res.render()


def test_nonfinite_result_where_truth_is_finite_fails():
    model = seeded_rounding_model(5, "gaussian", 0, 64, 64, 64, 1)
    y = model.y.to(torch.bfloat16)
    y[3, 7] = float("nan")
    res = no_systematic_bias(y, model, rank=0)
    assert not res.passed and not res.skipped and res.n_nan == 1
    assert "non-finite results where the truth is finite" in res.render()


def test_nonfinite_truths_are_left_to_the_nonfinite_check():
    inputs = all_rank_inputs(5, 64, 64, 64, 1, "nonfinite")
    model = rounding_model(inputs, 0, 64)
    y = inputs[0][0] @ inputs[0][1].T
    assert not torch.isfinite(y).all()
    res = no_systematic_bias(y, model, rank=0)
    assert res.passed, res.render()
    assert res.extra["n_informative"] < 64 * 64


def test_a_truth_past_bf16s_range_is_left_to_the_nonfinite_check():
    """A truth finite in fp64 but past bf16's largest value rounds to +-Inf in a correct result: not "a non-finite
    result where the truth is finite" (that is a truth within bf16's range)."""
    x, w = all_rank_inputs(5, 64, 64, 64, 1, "gaussian")[0]
    x, w = x.clone(), w.clone()
    x[3, :] = 0.0
    x[3, 0] = 2.0**127
    w[7, 0] = 4.0  # row 3, column 7: 2^129 in fp64
    model = rounding_model([(x, w)], 0, 64)
    y = (x.double() @ w.double().T).to(torch.bfloat16)
    assert torch.isinf(y[3, 7]) and torch.isfinite(y[:3]).all()
    res = no_systematic_bias(y, model, rank=0)
    assert res.passed, res.render()
    assert "non-finite results where the truth is finite" not in res.render()


def test_gathered_results_use_every_row():
    inputs = all_rank_inputs(9, 100, 64, 64, 4, "gaussian")
    model = rounding_model(inputs, None, 100)
    assert (model.n_valid, model.row_offset) == (100, 0)
    y = torch.stack([p.float() for p in (x @ w.T for x, w in inputs)]).sum(0)
    assert no_systematic_bias(y.bfloat16(), model).passed
    res = no_systematic_bias(bf16_toward_zero(y), model)
    assert not res.passed and "rows 0..99" in res.render()


@pytest.mark.parametrize("mutant", [BiasedRounding, ScaleError])
def test_mutants_fail_the_bias_check_within_tolerance(mutant):
    """W = 1 (no process group), gaussian inputs, a gate CPU shape and M."""
    M, N, K = 129, 256, 128
    inputs = all_rank_inputs(11, M, N, K, 1, "gaussian")
    model, truth = rounding_model(inputs, 0, M), shard_truth(inputs, 0, M)
    x, w = inputs[0]
    good = UnfusedGemmRs(None, max_M=M, N=N, K=K)(x, w)
    bad = mutant(None, max_M=M, N=N, K=K)(x, w)
    assert no_systematic_bias(good, model, rank=0).passed
    res = no_systematic_bias(bad, model, rank=0)
    assert not res.passed and not res.skipped, res.render()
    assert res.extra["z_along_sign"] < -res.extra["limit_along_sign"]
    within_tolerance(bad, truth, rank=0).raise_if_failed()  # the per-element tolerance cannot see it


def test_numerics_mutants_w2_over_gloo(dist_helpers):
    """W = 2 gloo ranks, a gate case: (N, K) = (256, 128), M = 129 then 256, gaussian inputs. On every rank
    the bias check fails BiasedRounding, BiasedRoundingHalfAway and ScaleError and passes unfused and
    PositionDependentRow; batch invariance fails PositionDependentRow (on the rank that holds the last,
    partial M tile) and passes the others; every one is within tolerance. One process group for both
    properties' mutants (test_batch_invariance.py tests the checker itself)."""
    params = {"N": 256, "K": 128, "M_a": 129, "M_b": 256, "seed": 11, "kind": "gaussian"}
    verdicts = dist_helpers.run_ranks(HERE / "_numerics_workers.py", "numerics_checks", 2, params)
    for v in verdicts:
        info = v["info"]
        for impl, checks in info.items():
            assert checks["within_tolerance"]["passed"], checks["within_tolerance"]["render"]
            bias = checks["no_systematic_bias"]
            assert not bias["skipped"], bias["render"]
            should_fail = impl in ("BiasedRounding", "BiasedRoundingHalfAway", "ScaleError")
            assert bias["passed"] != should_fail, f"{impl} rank {v['rank']}:\n{bias['render']}"
            invariance = checks["batch_invariant"]
            assert not invariance["skipped"], invariance["render"]
            if impl != "PositionDependentRow":
                assert invariance["passed"], f"{impl} rank {v['rank']}:\n{invariance['render']}"
    # M = 129 at W = 2: rank 1 holds rows 65..128, row 128 alone in the partial tile; at M = 256 no tile is partial
    position = [v["info"]["PositionDependentRow"]["batch_invariant"] for v in verdicts]
    assert position[0]["passed"], position[0]["render"]
    assert not position[1]["passed"] and "row 128 at M = 129 is row 128 at M = 256" in position[1]["render"]
