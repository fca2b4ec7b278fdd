"""Differential mode: the same cases on several implementations, results compared with each other.

    python -m fuzz.differential --impl fused,torch-async-tp,unfused --topology shared-gpu --world-sizes 2 \\
                                [--profile smoke|ci|nightly] [--cases N] [--family compute]

(``--profile`` sets how many cases: 10 / 40 / 200; ``--cases`` overrides it; several ``--world-sizes`` run
the comparison at each W.)

Every case runs on one pool per implementation (the gate's full property set still runs on each); each
call's result is fingerprinted on the ranks (fuzz.execute.digest). Then, call by call:

* exact-kind calls: every implementation that passed must give the same bits (the sum is exact, so any
  difference is a bug in one of them) — a disagreement fails the run and names the implementations;
* other kinds: bits may differ (accumulation order); each is already checked against the fp64 truth,
  so only the count of bitwise-identical results is reported.

Cases come from the gate's Hypothesis strategies (derandomized, so every implementation and every rerun
sees the same cases). Exit 0 when no exact-call disagreement and no implementation failed a case,
1 otherwise. The table lists, per implementation, its case statuses (a waived clause is a skip, not a
failure) and, per pair, the exact-call agreement.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import defaultdict

from hypothesis import HealthCheck, given, settings

from . import config
from .case import Case, PoolSpec
from .pool import RankPool
from .status import Status
from .strategies import FAMILY_STRATEGIES
from .verdict import unbuildable


def sample_cases(family: str, world_size: int, topology: str, n: int) -> list[Case]:
    """``n`` cases from the gate's strategy, the same on every run (derandomized)."""
    out: list[Case] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[__import__("hypothesis").Phase.generate])
    @given(FAMILY_STRATEGIES[family](world_size, topology))
    def collect(case):
        out.append(case)

    collect()
    return out[:n]


def call_digests(report) -> dict[tuple, tuple[str, str]]:
    """(call tag, M, rank) -> (kind, digest) of every checked call in a case report."""
    out = {}
    for rank, c in report.checks():
        d = c.get("extra", {}).get("digest")
        if c["name"] == "within_tolerance" and d:
            out[(c["extra"].get("call"), c["extra"].get("M"), rank)] = (c["extra"].get("kind"), d)
    return out


def compare(results: dict[str, list]) -> dict:
    """``results``: impl -> [CaseReport per case, same order]. Returns the comparison summary."""
    impls = list(results)
    statuses = {i: defaultdict(int) for i in impls}
    pairs = {p: {"exact_same": 0, "exact_differ": 0, "other_same": 0, "other_differ": 0}
             for p in itertools.combinations(impls, 2)}
    disagreements = []
    n_cases = len(next(iter(results.values()))) if results else 0
    for k in range(n_cases):
        digests = {}
        for impl in impls:
            rep = results[impl][k]
            statuses[impl][rep.status] += 1
            if rep.status in (Status.PASSED, Status.FAILED):
                digests[impl] = call_digests(rep)
        for a, b in pairs:
            if a not in digests or b not in digests:
                continue
            # in the order the calls were made (a set's order follows the string hash: it changed from process to
            # process, and so did the order the disagreements were named in)
            for key in (key for key in digests[a] if key in digests[b]):
                (kind, da), (_, db) = digests[a][key], digests[b][key]
                same = da == db
                bucket = ("exact_" if kind == "exact" else "other_") + ("same" if same else "differ")
                pairs[(a, b)][bucket] += 1
                call = key[:2]  # (tag, M): one entry per call, whichever ranks differ
                if kind == "exact" and not same and not any(
                        d["k"] == k and d["call"] == call and d["impls"] == (a, b) for d in disagreements):
                    rep = results[a][k]
                    disagreements.append({"k": k, "case": rep.case.to_json(), "call": call, "impls": (a, b),
                                          "repro": {i: results[i][k].repro() for i in (a, b)}})
    return {"statuses": {i: dict(s) for i, s in statuses.items()}, "pairs": pairs,
            "disagreements": disagreements}


def render(summary: dict) -> str:
    lines = ["implementation statuses:"]
    for impl, s in summary["statuses"].items():
        lines.append(f"  {impl:<40} " + ", ".join(f"{k} {v}" for k, v in sorted(s.items())))
    lines.append("pairwise results (exact calls must be bitwise identical; others are compared to the truth):")
    for (a, b), c in summary["pairs"].items():
        lines.append(f"  {a} vs {b}: exact {c['exact_same']} same / {c['exact_differ']} differ; "
                     f"other kinds {c['other_same']} bitwise same / {c['other_differ']} differ")
    for d in summary["disagreements"][:10]:
        lines.append(f"DISAGREE on exact inputs {d['call']} between {d['impls']}: case {d['case']}")
        for impl, line in d["repro"].items():
            lines.append(f"  REPRO ({impl}): {line}")
    return "\n".join(lines)


#: --profile -> cases per world size
PROFILE_CASES = {"smoke": 10, "ci": 40, "nightly": 200}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.differential", description=__doc__.splitlines()[0])
    config.add_to_parser(ap, "fuzz.differential", helps={"impl": "implementations to compare (two or more)"})
    ap.add_argument("--cases", type=int, default=None, help="cases per world size (default: by --profile)")
    ap.add_argument("--family", default="compute", choices=("compute", "graph"))
    args = ap.parse_args(argv)
    cfg = config.install(args)
    impls = cfg.csv("impl")
    if not impls or len(impls) < 2:
        ap.error("--impl needs two or more implementations to compare")
    topology = cfg.topology or "cpu"
    n = args.cases or PROFILE_CASES.get(cfg.profile, PROFILE_CASES["ci"])
    ok = True
    for w in [int(x) for x in cfg.csv("world_sizes") or ["2"]]:
        cases = sample_cases(args.family, w, topology, n)
        results: dict[str, list] = {}
        cannot: dict[str, object] = {}  # impl -> the report of the case that showed the host cannot build it
        for impl in impls:
            pool = RankPool(PoolSpec(impl=impl, topology=topology, world_size=w, optimize=sys.flags.optimize,
                                     nnodes=cfg.integer("nnodes") or 1))
            results[impl] = []
            try:
                for i, c in enumerate(cases):
                    results[impl].append(pool.run(c))
                    print(f"[differential] W={w} {impl}: case {i + 1}/{len(cases)} {results[impl][-1].status.value}",
                          flush=True)
                    if unbuildable(results[impl][-1]):  # every other case would fail the same way (fuzz/gate.py)
                        cannot[impl] = results.pop(impl)[-1]
                        break
            finally:
                pool.close()
        summary = compare(results)
        print(f"{len(cases)} {args.family} cases, W={w}, topology {topology}")
        print(render(summary))
        for impl, report in cannot.items():
            print(f"CANNOT BUILD {impl}: its main path cannot be built on this host, no case of it can pass here and "
                  f"none was compared (the first case's report below)\n{report.render()}")
        failed = any(v for i, s in summary["statuses"].items() for k, v in s.items() if not Status(k).ok)
        ok = ok and not summary["disagreements"] and not failed and not cannot
    print(f"verdict: {'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
