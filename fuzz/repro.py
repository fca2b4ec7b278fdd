"""Rerun one case exactly: ``python -m fuzz.repro --impl I --topology T --world-sizes W --case JSON``.

Starts a fresh pool of the same kind (``python -O`` here gives ranks optimize level 1), runs the case,
prints the report and ``verdict: <STATUS>``, exits 0 if it passed and 1 otherwise (2 on bad arguments).
Every failure the suite reports ends with such a line (REPRO: ...). Several ``--impl`` or ``--world-sizes``
rerun the case on each combination (exit 0 only if every one passed). A case from a pool across nodes
(``--nnodes N``) needs its node agents again (README, "Multi-node").
"""

from __future__ import annotations

import argparse
import sys

from . import config
from .case import Case, PoolSpec, decode_history
from .pool import RankPool
from .record import record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.repro", description=__doc__.splitlines()[0])
    config.add_to_parser(ap, "fuzz.repro")
    ap.add_argument("--case", required=True, help="the case as JSON (from a REPRO line)")
    ap.add_argument("--history", default=None, help="cases the failing pool ran before it (from a REPRO line): "
                    "replayed first, on the same fresh pool")
    ap.add_argument("--deadline", dest="case_deadline", default=None, help=argparse.SUPPRESS)  # old spelling
    ap.add_argument("--sanitizer", default=None, help="run the ranks under compute-sanitizer --tool=THIS")
    args = ap.parse_args(argv)
    cfg = config.install(args)
    if not cfg.world_sizes:
        ap.error("--world-sizes is required (the W of the REPRO line)")
    case = Case.from_json(args.case)
    history = decode_history(args.history) if args.history else []
    ok = True
    for impl in cfg.csv("impl") or ["unfused"]:
        for w in (int(x) for x in cfg.csv("world_sizes")):
            spec = PoolSpec(impl=impl, topology=cfg.topology or "cpu", world_size=w, optimize=sys.flags.optimize,
                            sanitizer=args.sanitizer, nnodes=cfg.integer("nnodes") or 1)
            pool = RankPool(spec, gpus=None)
            try:
                report = pool.run(case, deadline=cfg.number("case_deadline"), replay=history or None)
            finally:
                pool.close()
            record(report, "fuzz.repro")  # with --report-dir / GEMM_RS_REPORT_DIR: a case record, as the gate's
            print(report.render())
            print(f"verdict: {report.status.upper()}")
            ok = ok and report.passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
