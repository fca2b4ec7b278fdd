"""No systematic bias (CONTRACT, Numerics, added 2026-11-30): over all valid elements of a case, the
errors of a correct bf16 GEMM-RS against the fp64 truth average out — both the signed error and the
error taken along the sign of the truth. A per-element tolerance cannot see a biased rounding mode or a
small scale error (each element stays inside its budget); their average over thousands of elements can.

Model (derivation, bound and measured false-alarm rate: docs/NUMERICS.md). A correct implementation's
error ``e_i = y_i - Y64_i`` is a sum of round-to-nearest-even errors — the final bf16 rounding, the
W per-rank partials' bf16 roundings and the W - 2 inner sums of a bf16 reduction (gloo sums
``((p_{W-1} + p_{W-2}) + ...) + p_0`` rounding after every add), each about uniform on
[-ulp/2, ulp/2] — plus the fp32 accumulation error. So ``e_i = mu_i + eps_i``: ``eps_i`` independent
across elements and symmetric about 0, ``mu_i`` a systematic part a correct implementation may have:

* round to nearest on non-uniform data shifts a population of values v by up to
  :data:`TILT_PER_ROUNDING` * v, along sign(v) (magnitudes shrink: the cells straddling a binade
  boundary are lopsided) — for the result, each partial, and each inner sum (a sum of partials, in one
  order per shard); signs cancel in a sum over elements, so the bound is taken on the weighted sums;
* a fp32 accumulation may truncate toward zero after every :data:`MMA_MIN_K_BLOCK` products (tensor
  cores do): < 1 fp32 ulp of the running sum per step; the running sum drifts to the partial (a shift
  along sign(p), in the allowance) and fluctuates around it with either sign (noise, in ``sigma``).
  IEEE fp32 adds round to nearest: their tilt, ~2^-51 of the values, is left out.

For each statistic ``s_i`` in {1, sign(Y64_i)}, with weights ``a_i = 1 / sqrt(sigma_i^2 + allowance_i^2)``
(``sigma_i``: the model's spread; every element gets about the same say):

    T = sum a_i s_i e_i,   D = sqrt(sum (a_i s_i e_i)^2),   A >= |sum a_i s_i mu_i|,
    A2 = sqrt(sum (a_i s_i allowance_i)^2)  (allowance_i >= |mu_i|),
    pass  iff  |T| <= t (D + A2) + A

For independent symmetric ``eps_i``, P(|sum a s eps| >= t sqrt(sum (a s eps)^2)) <= 2 exp(-t^2 / 2)
(Hoeffding on the signs given the magnitudes: distribution-free, no variance model needed for
validity; sqrt(sum (a s eps)^2) <= D + A2). Two statistics per check: t = sqrt(2 ln(4 / p)) for a
false-alarm probability p (p = 1e-6: t = 5.51). The weights only buy power. ``T / D`` cannot exceed
sqrt(n) over n non-zero terms, so below ``ceil(t^2)`` informative elements (truth or a partial not
exactly representable in bf16: something was rounded) the check could not fail and is skipped, never
passed.

Inputs must be independent token rows (the gate's generators): k copies of one row give k identical
errors, and the statistic would count them k times.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from oracle.shards import shard_rows, valid_rows

from .result import CheckResult, read_back, skipped
from .tolerance import BF16_MAX, U_FP32

#: False-alarm probability per check (one call's shard) unless the caller passes another.
DEFAULT_FALSE_ALARM = 1e-6
#: Statistics tested per check (signed, along the sign of the truth): the Bonferroni factor of the bound.
N_STATISTICS = 2
#: Population bias of one round-to-nearest step, relative to the magnitude rounded. For a density of
#: |v| smooth on a log scale the mean bf16 rounding error is -2^-19/ln 2 * E|v| (the cells that straddle
#: a binade boundary are lopsided); sums of a few bf16 numbers (lattice-valued) reach about twice that
#: (docs/NUMERICS.md); the allowance is twice that again.
TILT_PER_ROUNDING = 2.0**-17 / math.log(2.0)
#: Products per step of a truncating (round-toward-zero) fp32 accumulation the model allows: tensor-core
#: MMA instructions add >= 8 bf16 products per step (mma k8 / k16, wgmma k16). IEEE fp32 arithmetic (CPU,
#: CUDA cores) rounds to nearest: its tilt, ~2^-51 of the values, is left out.
MMA_MIN_K_BLOCK = 8
SIGNED, ALONG_SIGN = "signed", "along the sign of the truth"
BF16_MANTISSA_BITS = 7
BF16_MIN_NORMAL_EXP = -126
FP64_MANTISSA_BITS = 52
FP64_EXPONENT_BIAS = 1023


def bound(false_alarm: float = DEFAULT_FALSE_ALARM) -> float:
    """The |z| a correct implementation exceeds with probability <= ``false_alarm`` (per check)."""
    if not 0.0 < false_alarm < 1.0:
        raise ValueError(f"false_alarm must be in (0, 1), got {false_alarm}")
    return math.sqrt(2.0 * math.log(2.0 * N_STATISTICS / false_alarm))


def min_informative(false_alarm: float = DEFAULT_FALSE_ALARM) -> int:
    """Fewest informative elements with which the check can fail at all (|T / D| <= sqrt(n))."""
    return math.ceil(bound(false_alarm) ** 2)


def bf16_ulp(v: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 numbers in the binade of each |v| (float64): 2^(floor(log2|v|) - 7), and the
    subnormal spacing 2^-133 below 2^-126 (zero included). Built from v's float64 exponent field."""
    biased = torch.bitwise_and(torch.bitwise_right_shift(v.contiguous().view(torch.int64), FP64_MANTISSA_BITS), 0x7FF)
    biased = torch.clamp(biased - BF16_MANTISSA_BITS, min=FP64_EXPONENT_BIAS + BF16_MIN_NORMAL_EXP - BF16_MANTISSA_BITS)
    return torch.bitwise_left_shift(biased, FP64_MANTISSA_BITS).view(torch.float64)


def _representable(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.bfloat16).to(torch.float64) == v


@dataclass
class RoundingModel:
    """What the bias check needs for the valid rows of one shard (or of the gathered result); everything
    that does not depend on the result is computed here, once."""

    y: torch.Tensor            # (n_valid, N) float64: the fp64 truth, 0 where not checked
    checked: torch.Tensor      # (n_valid, N) bool: truth and partials finite, truth within bf16 range
    informative: torch.Tensor  # (n_valid, N) bool: truth or a partial not exactly representable in bf16
    weight: torch.Tensor       # (n_valid, N): 1 / spread of a correct implementation's error; 0 if unchecked
    systematic: dict           # statistic -> A, bound on |sum weight * s * systematic part| (signs cancel)
    systematic_spread: dict    # statistic -> A2 = sqrt(sum (weight * s * allowance)^2)
    ulp_total: float           # sum of bf16 ulps of the informative truths (the mean error's unit)
    n_valid: int
    row_offset: int            # global row of row 0
    K: int
    world_size: int


def rounding_model(inputs, rank: int | None, M: int, device: torch.device | str = "cpu") -> RoundingModel:
    """Model for ``rank``'s shard (``rank=None``: all M rows, for a gathered result). ``inputs``:
    [(x_r, w_r) for r in range(W)], each x_r with all M rows (as :func:`oracle.shard_truth` takes)."""
    W = len(inputs)
    r0, n = _rows_of(rank, M, W)
    return _model_from_rows([(x[r0 : r0 + n], w) for x, w in inputs], r0, W, device, _owners(rank, M, W))


def seeded_rounding_model(seed: int, kind: str, rank: int | None, M: int, N: int, K: int, world_size: int,
                          device: torch.device | str = "cpu") -> RoundingModel:
    """Model for ``rank``'s shard, rebuilding only those rows of every rank's x from the case's seed."""
    from oracle.truth import seeded_rows

    r0, n = _rows_of(rank, M, world_size)
    rows = seeded_rows(seed, kind, (r0, r0 + n), M, N, K, world_size, device)
    return _model_from_rows(rows, r0, world_size, device, _owners(rank, M, world_size))


def _owners(rank: int | None, M: int, W: int) -> list[tuple[int, int]]:
    """Row ranges (local to the model) that one rank reduces: one per shard, so one reduction order each."""
    if rank is not None:
        return [(0, _rows_of(rank, M, W)[1])]
    S = shard_rows(M, W)
    return [(r * S, min(M, r * S + S)) for r in range(W) if r * S < M]


def _rows_of(rank: int | None, M: int, W: int) -> tuple[int, int]:
    if rank is None:
        return 0, M
    return rank * shard_rows(M, W), valid_rows(M, W, rank)


def _model_from_rows(rows, row_offset: int, W: int, device, owners: list[tuple[int, int]]) -> RoundingModel:
    n = rows[0][0].shape[0]
    N, K = rows[0][1].shape
    # A truncating fp32 accumulation (tensor cores) errs < 1 ulp <= 2 u32 |running sum| per step of B
    # products, mean <= u32 |running sum|. The running sum drifts to the partial, (k/K) p — a shift along
    # sign(p), bounded below like a rounding's tilt — and fluctuates around it with the products' L2 norm
    # q (a bridge: std ~ q sqrt(k/K (1 - k/K))), either sign: noise, like the roundings' (in sigma).
    steps = -(-K // MMA_MIN_K_BLOCK)
    drift = U_FP32 * steps / 2.0
    zeros = torch.zeros(n, N, dtype=torch.float64, device=device)
    y, abs_p, ulp_p2, acc_var = zeros.clone(), zeros.clone(), zeros.clone(), zeros.clone()
    partials_exact = torch.ones(n, N, dtype=torch.bool, device=device)
    partials = []  # every rank's partial of these rows: W * n * N float64 (about M * N for one shard)
    for x, w in rows:
        xd = x.to(device=device).to(torch.float64)  # widened on the device (see oracle.truth._accumulate)
        wd = w.to(device=device).to(torch.float64)
        p = xd @ wd.T
        q2 = (xd * xd) @ (wd * wd).T  # squared L2 norm of the K products
        y += p
        abs_p += p.abs()
        ulp_p2 += bf16_ulp(p) ** 2
        # round-to-nearest accumulation: K steps of variance <= (u32 |running sum|)^2 / 3;
        # truncating: the fluctuation of the running sum, (u32 steps)^2 q^2 / 6 summed over its steps
        acc_var += K * U_FP32**2 * (p * p + q2) / 3.0 + (U_FP32 * steps) ** 2 * q2 / 6.0
        partials_exact &= _representable(p)
        partials.append(p)
    checked = torch.isfinite(y) & (y.abs() <= BF16_MAX) & torch.isfinite(abs_p) & torch.isfinite(acc_var)
    zero = torch.zeros((), dtype=torch.float64, device=device)
    y, abs_p = torch.where(checked, y, zero), torch.where(checked, abs_p, zero)
    partials = [torch.where(checked, p, zero) for p in partials]
    # bf16 rounding steps: W = 1 rounds the accumulator once; W >= 2 may round every partial, every
    # intermediate sum of a bf16 reduction and the result. Intermediate sums: W - 2 inner nodes of any
    # reduction tree, whose magnitudes add up to at most those of a chain that adds the largest first.
    inner_sum, inner_ulp_sq = _inner_sums(partials)
    ulp_sq = bf16_ulp(y) ** 2 + (ulp_p2 + inner_ulp_sq if W > 1 else 0.0)
    variance = torch.where(checked, ulp_sq / 12.0 + acc_var, zero)
    # The systematic part: round to nearest shifts a population of values v by at most
    # TILT_PER_ROUNDING * v, along sign(v) — the result, each partial (rounded, and drifted by a truncating
    # accumulation) and each inner sum of the reduction. Signs cancel in a sum over elements, so the bound
    # is taken on the weighted sums. Inner sums are sums of partials, in one order per shard: their shifts
    # are sums of the partials' shifts, bounded like them, largest first.
    per_partial = (TILT_PER_ROUNDING if W > 1 else 0.0) + drift
    allowance = TILT_PER_ROUNDING * (y.abs() + inner_sum) + per_partial * abs_p
    weight = torch.where(checked, torch.rsqrt(variance + allowance**2), zero)
    # every sum the bounds need, reduced on the device and read back at once (one sync, not 2 W + 5)
    labels = ((SIGNED, torch.ones_like(y)), (ALONG_SIGN, torch.sign(y)))
    informative = checked & ~(_representable(y) & partials_exact)
    sums = []
    for _, s in labels:
        ws = weight * s
        sums += [(ws * y).sum(), ((ws * allowance) ** 2).sum()]
        sums += [(ws[lo:hi] * p[lo:hi]).sum() for lo, hi in owners for p in partials]
    sums.append(torch.where(informative, bf16_ulp(y), zero).sum())
    values = read_back(sums)
    systematic, spread = {}, {}
    per_label = 2 + len(owners) * len(partials)
    for i, (label, _) in enumerate(labels):
        along_y, spread_sq, *shift_sums = values[i * per_label : (i + 1) * per_label]
        along_partials = inner = 0.0
        for o in range(len(owners)):
            shifts = sorted((abs(v) for v in shift_sums[o * len(partials) : (o + 1) * len(partials)]), reverse=True)
            along_partials += sum(shifts)
            inner += sum(sum(shifts[: j + 1]) for j in range(1, W - 1))  # C_2 .. C_{W-1}
        systematic[label] = TILT_PER_ROUNDING * (abs(along_y) + inner) + per_partial * along_partials
        spread[label] = math.sqrt(spread_sq)
    ulp_total = values[-1]
    return RoundingModel(y, checked, informative, weight, systematic, spread, ulp_total, n, row_offset, K, W)


def _inner_sums(partials: list[torch.Tensor]) -> tuple[torch.Tensor | float, torch.Tensor | float]:
    """Bound on the summed magnitudes of the W - 2 inner sums of any reduction of the partials, and the sum
    of their squared bf16 ulps: sum over j = 2 .. W-1 of C_j, the sum of the j largest |p_r|."""
    if len(partials) <= 2:
        return 0.0, 0.0
    mags = torch.stack([p.abs() for p in partials]).sort(dim=0, descending=True).values
    largest_first = mags.cumsum(dim=0)[1:-1]  # C_2 .. C_{W-1}
    return largest_first.sum(0), (bf16_ulp(largest_first) ** 2).sum(0)


@dataclass(frozen=True)
class _Statistic:
    label: str
    z: float            # T / D
    limit: float        # the largest |z| allowed: t (1 + A2 / D) + A / D
    mean_ulp: float     # error along s over informative elements, in bf16 ulps of the truth (ratio of sums)
    passed: bool


def _statistic(label: str, T: float, D2: float, along_sum: float, model: RoundingModel, t: float):
    """From T = sum weight * s * e, D2 = sum (weight * s * e)^2 and ``along_sum`` = the sum of s * e over the
    informative elements."""
    D = math.sqrt(D2)
    limit = t * (D + model.systematic_spread[label]) + model.systematic[label]
    mean_ulp = along_sum / model.ulp_total
    if D > 0:
        return _Statistic(label, T / D, limit / D, mean_ulp, abs(T) <= limit)
    return _Statistic(label, 0.0, math.inf, mean_ulp, abs(T) <= limit)


_HINTS = {
    (ALONG_SIGN, -1): "magnitudes shrink: truncation toward zero, or a scale below 1?",
    (ALONG_SIGN, 1): "magnitudes grow: rounding half away from zero, or a scale above 1?",
    (SIGNED, -1): "results too low: rounding toward -inf, or an offset?",
    (SIGNED, 1): "results too high: rounding toward +inf, or an offset?",
}


def no_systematic_bias(actual: torch.Tensor, model: RoundingModel, *, rank: int | None = None,
                       false_alarm: float = DEFAULT_FALSE_ALARM, name: str = "no_systematic_bias") -> CheckResult:
    """Check the valid rows of ``actual`` ((S, N) shard, or (M, N) gathered with a ``rank=None`` model)
    for a systematic error. Elements whose truth is not finite in bf16 are left to
    :mod:`properties.nonfinite`; a non-finite result where the truth is finite fails here."""
    t = bound(false_alarm)
    n = model.n_valid
    a64 = actual[:n].detach().to(torch.float64)
    model = _on(model, a64.device)
    where = f"rows {model.row_offset}..{model.row_offset + n - 1}" if n else "no valid rows"
    zero = torch.zeros((), dtype=torch.float64, device=a64.device)
    e = torch.where(model.checked, a64 - model.y, zero)
    weighted = model.weight * e
    sign = torch.sign(model.y)
    # every number of the check reduced on the device and read back at once (result.read_back)
    sums = {"total": model.checked.sum(), "broken": (model.checked & ~torch.isfinite(a64)).sum(),
            "nan": (model.checked & torch.isnan(a64)).sum(), "inf": (model.checked & torch.isinf(a64)).sum(),
            "informative": model.informative.sum()}
    for label, w_s, along in ((SIGNED, weighted, e), (ALONG_SIGN, weighted * sign, e * sign)):
        sums[("T", label)], sums[("D2", label)] = w_s.sum(), (w_s * w_s).sum()
        sums[("along", label)] = torch.where(model.informative, along, zero).sum()
    got = dict(zip(sums, read_back(sums.values())))
    total, broken = int(got["total"]), int(got["broken"])
    if broken:
        return CheckResult(name=name, passed=False, rank=rank, total=total, n_wrong=broken,
                           n_nan=int(got["nan"]), n_inf=int(got["inf"]),
                           detail=f"{broken} non-finite results where the truth is finite ({where}): "
                                  "no mean error to speak of; the result is wrong outright")
    n_inf = int(got["informative"])
    need = min_informative(false_alarm)
    if n_inf < need:
        return skipped(name, f"not applicable: {n_inf} informative elements (truth or a partial not exactly "
                             f"representable in bf16) of {total} finite ({where}); at a false-alarm probability of "
                             f"{false_alarm:g} the check needs {need} to be able to fail (exact or zero inputs "
                             "round nothing: bitwise_equal judges them)", rank)
    stats = [_statistic(label, got[("T", label)], got[("D2", label)], got[("along", label)], model, t)
             for label in (SIGNED, ALONG_SIGN)]
    passed = all(s.passed for s in stats)
    lines = []
    for s in stats:
        verdict = "ok" if s.passed else "BIASED"
        hint = "" if s.passed else "  <- " + _HINTS[(s.label, 1 if s.z > 0 else -1)]
        lines.append(f"{s.label}: z = {s.z:+.2f} (|z| <= {s.limit:.2f} allowed), mean error {s.mean_ulp:+.4f} ulp "
                     f"[{verdict}]{hint}")
    lines.append(f"over {n_inf} informative of {total} finite elements ({where}); bound t = {t:.2f} for a "
                 f"false-alarm probability of {false_alarm:g} per check (docs/NUMERICS.md)")
    res = CheckResult(name=name, passed=passed, rank=rank, detail="\n".join(lines))
    res.extra.update({
        "z_signed": stats[0].z, "limit_signed": stats[0].limit, "mean_ulp_signed": stats[0].mean_ulp,
        "z_along_sign": stats[1].z, "limit_along_sign": stats[1].limit, "mean_ulp_along_sign": stats[1].mean_ulp,
        "n_informative": n_inf, "bound": t, "false_alarm": false_alarm,
    })
    return res


def _on(model: RoundingModel, dev) -> RoundingModel:
    if model.y.device == dev:
        return model
    moved = {k: getattr(model, k).to(dev) for k in ("y", "checked", "informative", "weight")}
    return dataclasses.replace(model, **moved)
