"""The sanitizer's family: the implementation's calls at the case's Ms and nothing else of a case's GPU work -- no
oracle, no fp64 truth, no value checks. ``python -m fuzz.sanitize --calls-only`` runs the declared kernel paths so:
under racecheck every kernel of the process is instrumented, and the oracle's and the truth's GEMMs took most of a
racecheck case's time (208 s for one path case on one H200, 14th session; filtering the instrumentation to our
kernels makes compute-sanitizer fail on a hardware exception, ``fuzz/sanitize.py``). The verdict on such a case is
the sanitizer's report, plus each call's own checks (:meth:`RankContext.call`: the path it took, the result contract,
a raising call); the values are the gate's families' to judge, never this one's. The gate never draws it."""

from __future__ import annotations

from oracle.shards import shard_rows
from properties import sentinel_like
from properties.result import CheckResult

from ..case import Case
from .context import RankContext


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    for i, (M, kind) in enumerate(zip(case.ms, case.call_kinds())):
        seed = case.seed + i
        x, w = ctx.x(case, seed, M, kind), ctx.w(case, seed, kind)
        out = sentinel_like((shard_rows(M, ctx.world_size), case.N), device=ctx.device) \
            if case.out == "guarded" else None
        if case.late_rank == ctx.rank and case.delay_ms > 0:
            ctx.delay(case.delay_ms)
        for j in range(max(1, case.repeat)):
            ctx.call(impl, x, w, out, tag=f"call{i}" + (f".repeat{j}" if j else ""))
        ctx.sync()
    return []  # the calls' own checks are the ledger's (run_case adds them)
