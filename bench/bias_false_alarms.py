"""False-alarm rate and power of the bias check (properties/bias.py), measured — the numbers in
docs/NUMERICS.md come from this script. A measurement, not a test.

    python bench/bias_false_alarms.py [--cases 10000] [--gloo-cases 280] [--seed 0] [--shapes cpu|gpu]
                                      [--out results.jsonl]

Cases are drawn like the gate draws compute cases on CPU: (N, K) from the gate's CPU shapes, M from its
boundary values or uniform in 1..8192, W in 1..8, kinds gaussian / small / large / skewed; one rank's
shard is checked per case (the check runs per rank). On each case:

* correct implementations (every one must pass): the fp32 sum of bf16 partials rounded once, the bf16
  chain a gloo reduce-scatter computes (((p_{W-1} + p_{W-2}) + ...) + p_0, rounded after every add,
  measured on torch 2.13), the fp32 sum of unrounded fp32 partials, and a tensor-core-like fp32
  accumulation that truncates toward zero after every block of 8 products (the model's limit);
* planted biases (power): the final rounding truncated toward zero, ties rounded away from zero, a
  scale of 1 - 2^-9 and of 1 - 2^-12 before the final rounding, +1 ulp on 1% of the elements.

``--tilt`` prints the population bias of round-to-nearest on a few value distributions, as a fraction
of :data:`properties.bias.TILT_PER_ROUNDING` (the allowance must stay above it).

``--gloo-cases`` more cases run the oracle itself (``oracle.reference_gemm_rs`` over real gloo groups,
W = 2..8, every rank's shard checked). Prints the tables; ``--out`` keeps one JSON line per check.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fuzz.strategies import MAX_M, SHAPES, boundary_ms  # noqa: E402
from mutants.catalogue import bf16_half_away, bf16_toward_zero  # noqa: E402
from oracle.inputs import all_rank_inputs  # noqa: E402
from properties.bias import (  # noqa: E402
    MMA_MIN_K_BLOCK,
    TILT_PER_ROUNDING,
    bf16_ulp,
    bound,
    no_systematic_bias,
    rounding_model,
)

KINDS = ("gaussian", "small", "large", "skewed")
CORRECT = ("fp32_sum_of_bf16_partials", "gloo_bf16_chain", "fp32_partials_fp32_sum", "truncating_fp32_blocks8")
BIASED = ("truncate_final", "ties_away_final", "scale_1-2^-9", "scale_1-2^-12", "plus_1ulp_on_1pct")
TC_BLOCK = MMA_MIN_K_BLOCK  # products per truncating accumulation step: the fewest the model allows


def draw_case(rng: random.Random, machine: str = "cpu") -> dict:
    W = rng.randint(1, 8)
    N, K = rng.choice(SHAPES[machine])
    max_M = MAX_M[machine]
    M = rng.choice(boundary_ms(W, max_M)) if rng.random() < 0.5 else rng.randint(1, max_M)
    return {"seed": rng.randrange(2**31), "W": W, "N": N, "K": K, "M": M, "kind": rng.choice(KINDS),
            "rank": rng.randrange(W)}


def shard_slice(M: int, W: int, rank: int) -> slice:
    S = -(-M // W)
    return slice(rank * S, min(M, rank * S + S))


def _chain_bf16(parts):
    acc = parts[-1]
    for p in reversed(parts[:-1]):
        acc = acc + p  # bf16 + bf16, rounded after every add
    return acc


def _truncate_to_fp32(v64: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounding toward zero: one step toward zero where round-to-nearest went past."""
    f = v64.to(torch.float32)
    over = f.double().abs() > v64.abs()
    return torch.where(over, (f.view(torch.int32) - 1).view(torch.float32), f)


def _truncating_accumulation(x: torch.Tensor, w: torch.Tensor, chunk_bytes: int = 1 << 28) -> torch.Tensor:
    """fp32 ``x @ w.T`` accumulated in blocks of TC_BLOCK products (each block sum exact in fp64), the
    running sum truncated toward zero after every block."""
    S, K = x.shape
    nb = -(-K // TC_BLOCK)
    pad = nb * TC_BLOCK - K
    xb = torch.nn.functional.pad(x.double(), (0, pad)).view(S, nb, TC_BLOCK).transpose(0, 1)  # (nb, S, B)
    wb = torch.nn.functional.pad(w.double(), (0, pad)).view(-1, nb, TC_BLOCK).permute(1, 2, 0)  # (nb, B, N)
    out = torch.empty(S, w.shape[0], dtype=torch.float32)
    rows_per_chunk = max(1, chunk_bytes // (8 * nb * w.shape[0]))
    for r0 in range(0, S, rows_per_chunk):
        blocks = torch.bmm(xb[:, r0 : r0 + rows_per_chunk], wb)
        acc = torch.zeros_like(blocks[0])
        for b in range(nb):
            acc = _truncate_to_fp32(acc + blocks[b]).double()
        out[r0 : r0 + rows_per_chunk] = acc.float()
    return out


def implementations(rows, case: dict) -> dict[str, torch.Tensor]:
    """Every correct and biased result for the shard rows ``rows`` = [(x_r shard rows, w_r)]."""
    p16 = [x @ w.T for x, w in rows]
    p32 = [torch.mm(x.float(), w.float().T) for x, w in rows]
    sum16 = torch.stack([p.float() for p in p16]).sum(0)
    sum32 = torch.stack(p32).sum(0)
    tc = torch.stack([_truncating_accumulation(x, w).to(torch.bfloat16).float() if len(rows) > 1
                      else _truncating_accumulation(x, w) for x, w in rows]).sum(0)
    correct = sum16.to(torch.bfloat16)
    bump = torch.rand(correct.shape, generator=torch.Generator().manual_seed(case["seed"])) < 0.01
    up = torch.where(torch.isfinite(correct), correct.double() + bf16_ulp(correct.double()), correct.double())
    return {
        "fp32_sum_of_bf16_partials": correct,
        "gloo_bf16_chain": _chain_bf16(p16),
        "fp32_partials_fp32_sum": sum32.to(torch.bfloat16),
        "truncating_fp32_blocks8": tc.to(torch.bfloat16),
        "truncate_final": bf16_toward_zero(sum32),
        "ties_away_final": bf16_half_away(sum16),
        "scale_1-2^-9": (sum32 * (1.0 - 2.0**-9)).to(torch.bfloat16),
        "scale_1-2^-12": (sum32 * (1.0 - 2.0**-12)).to(torch.bfloat16),
        "plus_1ulp_on_1pct": torch.where(bump, up, correct.double()).to(torch.bfloat16),
    }


def run_case(case: dict) -> list[dict]:
    inputs = all_rank_inputs(case["seed"], case["M"], case["N"], case["K"], case["W"], case["kind"])
    rank = case["rank"]
    model = rounding_model(inputs, rank, case["M"])
    sl = shard_slice(case["M"], case["W"], rank)
    rows = [(x[sl], w) for x, w in inputs]
    out = []
    for impl, y in implementations(rows, case).items():
        res = no_systematic_bias(y, model, rank=rank)
        out.append(_record(case, impl, res))
    return out


def _record(case, impl, res) -> dict:
    rec = {**case, "impl": impl, "skipped": res.skipped, "passed": bool(res.passed),
           "n": res.extra.get("n_informative")}
    for key in ("z_signed", "limit_signed", "z_along_sign", "limit_along_sign", "mean_ulp_signed",
                "mean_ulp_along_sign"):
        if key in res.extra:
            rec[key] = round(res.extra[key], 4)
    return rec


# --- the oracle itself over gloo ------------------------------------------------------------------------


def _gloo_rank(rank: int, W: int, port: int, cases: list[dict], queue) -> None:
    import torch.distributed as dist

    from oracle import reference_gemm_rs

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=W)
    recs = []
    for case in cases:
        inputs = all_rank_inputs(case["seed"], case["M"], case["N"], case["K"], W, case["kind"])
        y = reference_gemm_rs(*inputs[rank])
        res = no_systematic_bias(y, rounding_model(inputs, rank, case["M"]), rank=rank)
        recs.append(_record({**case, "rank": rank}, "oracle_over_gloo", res))
    queue.put(recs)
    dist.destroy_process_group()


def run_gloo(n_cases: int, rng: random.Random) -> list[dict]:
    import torch.multiprocessing as mp

    recs = []
    per_w = max(1, n_cases // 7)
    for W in range(2, 9):
        cases = []
        for _ in range(per_w):
            c = draw_case(rng)
            c["M"] = min(c["M"], 2048)  # the oracle's gloo round trip dominates; shards stay thousands of elements
            cases.append({**c, "W": W})
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        port = 29600 + W + rng.randrange(1000)
        mp.start_processes(_gloo_rank, args=(W, port, cases, queue), nprocs=W, start_method="spawn")
        for _ in range(W):
            recs.extend(queue.get())
    return recs


# --- the rounding tilt ------------------------------------------------------------------------------


def tilt_table(n: int = 16_000_000, seed: int = 0) -> str:
    """Population bias of round-to-nearest-even to bf16, sum of s * a(v) * (bf16(v) - v) over a sample,
    as a fraction c of TILT_PER_ROUNDING * sum a(v) |v| (s = sign(v)), for weights a = 1 and a = 1/ulp."""
    g = torch.Generator().manual_seed(seed)

    def bf16_sum(k):
        return sum(torch.randn(n, generator=g, dtype=torch.float64).bfloat16().double() for _ in range(k))

    samples = {
        "gaussian": torch.randn(n, generator=g, dtype=torch.float64),
        "laplace": -torch.log(torch.rand(n, generator=g, dtype=torch.float64)) * (torch.randint(
            0, 2, (n,), generator=g) * 2 - 1),
        "uniform [-1, 1]": torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1,
        "sum of 2 bf16 gaussians": bf16_sum(2),
        "sum of 8 bf16 gaussians": bf16_sum(8),
    }
    lines = ["| values | c (a = 1) | c (a = 1/ulp) |", "|---|---|---|"]
    for name, v in samples.items():
        e, s = v.bfloat16().double() - v, torch.sign(v)
        cells = []
        for a in (torch.ones_like(v), 1.0 / bf16_ulp(v)):
            cells.append(f"{-float((a * s * e).sum()) / (TILT_PER_ROUNDING * float((a * v.abs()).sum())):+.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- tables ---------------------------------------------------------------------------------------------


def _spread(z: list[float]) -> tuple[float, float]:
    m = sum(z) / len(z)
    return m, (sum((v - m) ** 2 for v in z) / len(z)) ** 0.5


def summarize(recs: list[dict], t: float) -> str:
    """The false-alarm table (correct implementations) and the power table (planted biases)."""
    by_impl = defaultdict(list)
    for r in recs:
        by_impl[r["impl"]].append(r)
    lines = [f"bound t = {t:.3f} (false-alarm probability 1e-6 per check, two statistics)", "",
             "| correct computation | checks | skipped | failed | signed z: mean, sd, max abs | "
             "along-sign z: mean, sd, max abs | max abs z / allowed |", "|---|---|---|---|---|---|---|"]
    for impl in (*CORRECT, "oracle_over_gloo"):
        if not by_impl.get(impl):
            continue
        rs = [r for r in by_impl[impl] if not r["skipped"]]
        zs, za = [r["z_signed"] for r in rs], [r["z_along_sign"] for r in rs]
        (ms, ss), (ma, sa) = _spread(zs), _spread(za)
        worst = max(max(abs(r["z_signed"]) / r["limit_signed"], abs(r["z_along_sign"]) / r["limit_along_sign"])
                    for r in rs)
        lines.append(f"| {impl} | {len(rs)} | {len(by_impl[impl]) - len(rs)} | {sum(not r['passed'] for r in rs)} | "
                     f"{ms:+.2f}, {ss:.2f}, {max(map(abs, zs)):.2f} | {ma:+.2f}, {sa:.2f}, {max(map(abs, za)):.2f} | "
                     f"{worst:.2f} |")
    buckets = [(31, 1000), (1000, 10_000), (10_000, 100_000), (100_000, 10**9)]
    head = " | ".join(f"n {lo}..{hi if hi < 10**9 else 'inf'}" for lo, hi in buckets)
    lines += ["", "Power: fraction of (non-skipped) checks that fail (checks), by W and by informative elements n",
              f"| planted bias | all | W=1 | W=2 | W=3..8 | {head} |", "|---|---|---|---|---|" + "---|" * len(buckets)]
    for impl in BIASED:
        rs = [r for r in by_impl.get(impl, []) if not r["skipped"]]

        def frac(sel):
            sel = list(sel)
            return f"{sum(not r['passed'] for r in sel) / len(sel):.3f} ({len(sel)})" if sel else "-"

        cells = [frac(rs), frac(r for r in rs if r["W"] == 1), frac(r for r in rs if r["W"] == 2),
                 frac(r for r in rs if r["W"] >= 3)]
        cells += [frac(r for r in rs if lo <= r["n"] < hi) for lo, hi in buckets]
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--gloo-cases", type=int, default=280)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="cpu",
                    help="the gate's (N, K) list to draw from (gpu: shards of up to 58M elements, slow on a CPU)")
    ap.add_argument("--out", default=None, help="JSON lines, one per check")
    ap.add_argument("--tilt", action="store_true", help="only print the rounding-tilt table (the derivation's check)")
    ap.add_argument("--summarize", metavar="JSONL", help="only print the tables of an earlier run's --out file")
    args = ap.parse_args()
    if args.tilt:
        print(tilt_table())
        return 0
    if args.summarize:
        with open(args.summarize) as f:
            print(summarize([json.loads(line) for line in f], bound()))
        return 0
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    recs, t0 = [], time.time()
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 — closed below
    for i in range(args.cases):
        case_recs = run_case(draw_case(rng, args.shapes))
        recs.extend(case_recs)
        if out:
            out.writelines(json.dumps(r) + "\n" for r in case_recs)
        if (i + 1) % 500 == 0:
            print(f"[bias] {i + 1}/{args.cases} cases, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    if args.gloo_cases:
        gloo = run_gloo(args.gloo_cases, rng)
        recs.extend(gloo)
        if out:
            out.writelines(json.dumps(r) + "\n" for r in gloo)
    if out:
        out.close()
    print(f"{args.cases} cases (+{args.gloo_cases} over gloo) in {time.time() - t0:.0f} s")
    print(summarize(recs, bound()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
