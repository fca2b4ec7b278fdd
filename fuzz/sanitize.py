"""Sanitizer mode: a few small cases with every rank under NVIDIA compute-sanitizer.

    python -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 2 [--tool memcheck|racecheck|synccheck]
                            [--paths all|split|cluster [--paths-only] [--calls-only]] [--time-limit S]

The ranks run as ``compute-sanitizer --tool=T --log-file=<pool logdir>/sanitizer-<pid>.log python -m
fuzz.rank_worker`` (host API errors are not reported: CuTe DSL's architecture probe makes some on
purpose). The cases (compute at unaligned M with exact inputs, alternation, a late rank, a rejected
call, a graph replay) run as usual -- with ``--paths``, also the gate's cases of the kernel paths the
implementation declares (``all``, or ``split``: the fused kernel's split-K ones, labelled ``split-K``, or
``cluster``: the fused kernel's clustered tiles, whose CTAs fill each other's shared memory;
:func:`fuzz.strategies.path_cases`); then the pool is closed so every sanitizer writes its summary, and
the verdict needs every rank's ``ERROR SUMMARY: 0 errors`` (racecheck: no hazard but in the library kernels
of :data:`LIBRARY_KERNELS`, which are listed) plus every case passed (a skipped case ran nothing under the
sanitizer: NOT CLEAN). Exit 0 / 1. With ``--time-limit``
no case starts past the limit; the pool is still closed, so the sanitizers report on what ran, and a run that left
a case out ends ``CUT`` (exit 1), never ``CLEAN``.

``--calls-only``: each declared path's calls alone (family ``calls_only``, :mod:`fuzz.families.calls_only`: no
oracle, truth or value check; each call's own checks stay): under racecheck every kernel of a process is instrumented,
and the oracle's and the truth's GEMMs took most of a racecheck case's time (one path case 208 s on an H200; every
declared path at W = 1 and 2 in 66 s so, 14th session). Instrumenting our kernels alone instead (compute-sanitizer
2025.3.1 ``--kernel-name kns=kernel_cutlass_``, or excluding cuBLAS's ``nvjet_`` kernels) made the sanitizer fail on a
hardware exception at the first fused call ("Internal Sanitizer Error: The Sanitizer failed to handle a hardware
exception"; the same cases pass under full racecheck and memcheck): not used.

racecheck: first the same compute-sanitizer command runs :mod:`fuzz.race_canary`, a kernel with a shared-memory race
on purpose; without its hazard reported the verdict is NOT CLEAN (a racecheck that saw nothing would read CLEAN
whatever our kernels did). The canary's hazard is in its own log, never counted against the implementation.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from . import config
from .case import Case, PoolSpec
from .node import sanitizer_command
from .pool import RankPool
from .race_canary import CANARY
from .status import Status
from .verdict import unbuildable

SMALL = dict(N=512, K=256, max_M=1024)


def cases(impl: str = "fused", world_size: int = 2, paths: str = "", paths_only: bool = False,
          calls_only: bool = False) -> list[Case]:
    """The small cases (none with ``paths_only``), then (``paths``: ``all``, ``split`` or ``cluster``) the declared
    paths' cases -- with ``calls_only``, each path's calls alone (:func:`calls_only_cases`)."""
    from .strategies import declared_paths, path_cases

    def chosen(path) -> bool:
        return (paths == "all" or (paths == "split" and "split-K" in path.label)
                or (paths == "cluster" and CLUSTER_LABEL.search(path.label) is not None))

    declared = [(i, p) for i, p in enumerate(declared_paths(impl, world_size)) if chosen(p)] if paths else []
    path_work = [c for i, p in declared for c in path_cases(p, i)]
    return ([] if paths_only else SMALL_CASES) + (calls_only_cases(path_work) if calls_only else path_work)


def calls_only_cases(full: list[Case]) -> list[Case]:
    """The ``calls_only`` family's case of each case in ``full`` (:mod:`fuzz.families.calls_only`: the same
    instance shape, Ms and input kinds, each call made twice, no oracle, truth or value check), one per distinct
    (N, K, max_M, Ms): a path's graph case calls the kernel of its compute case."""
    out, seen = [], set()
    for c in full:
        key = (c.N, c.K, c.max_M, tuple(c.ms))
        if any(key[:3] == s[:3] and set(key[3]) <= set(s[3]) for s in seen):
            continue
        seen.add(key)
        out.append(Case("calls_only", c.seed, c.N, c.K, c.max_M, list(c.ms), c.kind, c.out, repeat=2,
                        kinds=c.kinds))
    return out


#: A declared path of clustered tiles (``kernel.fused.config.GemmConfig.label``: ``64x128c2``).
CLUSTER_LABEL = re.compile(r"\b\d+x\d+c\d+\b")

SMALL_CASES = [
    Case("compute", seed=1, ms=[129, 7, 129], kind="exact", **SMALL),
    Case("compute", seed=2, ms=[1, 1000], kind="gaussian", late_rank=0, delay_ms=20, **SMALL),
    Case("capacity", seed=3, ms=[5], bad="over", **SMALL),
    Case("graph", seed=4, ms=[257], kind="exact", repeat=2, **SMALL),
]


#: Kernels of other libraries whose racecheck hazards are listed but not counted against the implementation, by
#: substring of the mangled name: cuBLAS's ``nvjet_sm90_*`` (torch.mm of the oracle, the truth and the unfused
#: fallback). On one H200 (13th session) racecheck reported 448 hazards in each of two of them (shared memory
#: ordered by TMA and mbarriers, which racecheck does not follow) and none in this project's kernels. They stay
#: instrumented (``--kernel-name-exclude`` made the sanitizer fail on a hardware exception in the same run); a hazard
#: naming any other kernel, or one not displayed (past ``--print-limit``), counts.
LIBRARY_KERNELS = ("nvjet_",)

_RACE = re.compile(r"(?:Error|Warning): Race reported between \w+ access at (\S+?)\+0x[0-9a-f]+\s*\n=*\s*"
                   r"and \w+ access at (\S+?)\+0x[0-9a-f]+")


def library_hazards(text: str) -> list[str]:
    """The racecheck reports in ``text`` whose two accesses are both in :data:`LIBRARY_KERNELS` (one line each)."""
    return [f"{a} / {b}" for a, b in _RACE.findall(text)
            if all(any(lib in k for lib in LIBRARY_KERNELS) for k in (a, b))]


def canary_heard(tool: str = "racecheck", timeout_s: float = 300.0) -> tuple[bool, str]:
    """Run :mod:`fuzz.race_canary` under compute-sanitizer's ``tool`` as the ranks run
    (:func:`fuzz.node.sanitizer_command`): (its hazard was reported, what to print: the canary's log or why not)."""
    logdir = tempfile.mkdtemp(prefix="gemm-rs-race-canary-")
    log = os.path.join(logdir, "canary.log")
    cmd = sanitizer_command(tool, log) + [sys.executable, "-u", "-m", "fuzz.race_canary"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"the race canary did not finish in {timeout_s:.0f} s: {' '.join(cmd)}"
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    heard = [f"{a} / {b}" for a, b in _RACE.findall(text) if CANARY in a and CANARY in b]
    if done.returncode != 0 or not heard:
        return False, (f"the race canary's hazard was not reported (exit {done.returncode}; {' '.join(cmd)}):\n"
                       f"{(done.stdout + done.stderr)[-2000:]}\n{text[-2000:]}")
    return True, f"race canary: racecheck reported {heard[0]} ({log})"


def summaries(logdir: str, library: list[str] | None = None) -> dict[str, int | None]:
    """Per sanitizer log in ``logdir``: the error count of its summary, None when there is none (the
    process did not finish). memcheck/synccheck/initcheck end with ``ERROR SUMMARY: N errors``; racecheck with
    ``RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)``, whose errors and warnings both count but
    for the reports in library kernels (:func:`library_hazards`, appended to ``library``)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(logdir, "sanitizer-*.log"))):
        text = open(path, errors="replace").read()
        m = re.findall(r"ERROR SUMMARY: (\d+) error", text)
        race = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
        if race:
            theirs = library_hazards(text)
            if library is not None:
                library += [f"{os.path.basename(path)}: {h}" for h in theirs]
            out[os.path.basename(path)] = max(0, int(race[-1][0]) + int(race[-1][1]) - len(theirs))
        else:
            out[os.path.basename(path)] = int(m[-1]) if m else None
    return out


#: Seconds a sanitized case may take (``--case-deadline`` left at its default): instrumented kernels are slow.
SANITIZED_CASE_DEADLINE_S = 600.0
TOPOLOGIES = ("shared-gpu", "multi-gpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.sanitize", description=__doc__.splitlines()[0])
    config.add_to_parser(ap, "fuzz.sanitize", helps={
        "impl": "implementations, each run in turn (default here: fused)",
        "world_sizes": "W, each run in turn on its own pool (default here: 2)",
        "topology": f"one of {', '.join(TOPOLOGIES)} (default here: shared-gpu)",
        "case_deadline": f"seconds per case (default here: {SANITIZED_CASE_DEADLINE_S:.0f}: sanitized kernels are "
                         "slow)"})
    ap.add_argument("--deadline", dest="case_deadline", default=None, help=argparse.SUPPRESS)  # old spelling
    ap.add_argument("--tool", default="memcheck")
    ap.add_argument("--paths", default="", choices=("", "all", "split", "cluster"),
                    help="also the cases of the implementation's declared kernel paths (split: the split-K ones; "
                         "cluster: the clustered tiles)")
    ap.add_argument("--paths-only", action="store_true",
                    help="only the declared paths' cases (racecheck is slow: the small cases can fill a time budget)")
    ap.add_argument("--calls-only", action="store_true",
                    help="the declared paths' calls alone (family calls_only: no oracle, truth or value check; the "
                         "verdict is the sanitizer's report and each call's own checks): racecheck of every path "
                         "in one run")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="seconds (per pool) after which no further case starts; the pool is still closed so the "
                         "sanitizers report on what ran, and the verdict is CUT (never CLEAN) when a case was left out")
    ap.add_argument("--close-grace", type=float, default=180.0, help="seconds the ranks get to exit and report")
    args = ap.parse_args(argv)
    cfg = config.install(args)
    topology = cfg.topology or "shared-gpu"
    if topology not in TOPOLOGIES:
        ap.error(f"--topology must be one of {', '.join(TOPOLOGIES)}, not {topology!r}")
    if (args.paths_only or args.calls_only) and not args.paths:
        ap.error("--paths-only and --calls-only need --paths")
    impls = cfg.csv("impl") or ["fused"]
    sizes = [int(w) for w in cfg.csv("world_sizes") or ["2"]]
    deadline = (SANITIZED_CASE_DEADLINE_S if cfg.sources["case_deadline"] == "default"
                else cfg.number("case_deadline"))
    if shutil.which("compute-sanitizer") is None:
        print("compute-sanitizer is not on PATH: sanitizer mode needs the CUDA toolkit")
        return 2
    if args.tool == "racecheck":
        heard, said = canary_heard(args.tool)
        print(said, flush=True)
        if not heard:
            print("sanitizer racecheck: NOT CLEAN (racecheck did not report the race canary's hazard: it cannot be "
                  "shown to see a race here)")
            return 1
    verdicts = []
    for impl in impls:
        for world_size in sizes:
            todo = cases(impl, world_size, args.paths, args.paths_only, args.calls_only)
            if args.paths and len(todo) == len(cases(impl, world_size, "", args.paths_only)):
                print(f"--paths {args.paths}: {impl} declares no such kernel path at W={world_size}")
                return 2
            verdicts.append(run_pool(PoolSpec(impl=impl, topology=topology, world_size=world_size,
                                              optimize=sys.flags.optimize, sanitizer=args.tool),
                                     todo, deadline, args.time_limit, args.close_grace))
    return 0 if all(verdicts) else 1


def run_pool(spec: PoolSpec, todo: list[Case], deadline: float, time_limit: float, close_grace: float) -> bool:
    """``todo`` on a fresh sanitized pool of ``spec``, then its verdict printed: whether it is CLEAN."""
    pool = RankPool(spec)
    reports = []
    started = time.monotonic()
    try:
        for case in todo:
            if time_limit and time.monotonic() - started > time_limit:
                break
            report = pool.run(case, deadline=deadline)
            reports.append(report)
            print(f"{report.status:>8}  {case.short()}", flush=True)
            if not report.status.ok:
                print(report.render())
                if unbuildable(report):  # every other case would fail the same way (fuzz/gate.py)
                    print(f"CANNOT BUILD {spec.impl}: its main path cannot be built on this host; no other case runs")
                    break
    finally:
        pool.close(grace_s=close_grace)  # sanitizers write their summaries at exit: give them time
    library: list[str] = []
    sums = summaries(pool.logdir, library)
    for name, n in sums.items():
        print(f"{name}: {'no ERROR SUMMARY (process did not finish cleanly)' if n is None else f'{n} errors'}")
    for hazard in library:
        print(f"not counted (a library's kernel, LIBRARY_KERNELS): {hazard}")
    ok = (len(sums) == spec.world_size and all(n == 0 for n in sums.values())
          and all(r.status.ok for r in reports))
    cut = len(reports) < len(todo)
    # a case whose every check was skipped ran nothing under the sanitizer: like a case left out, never CLEAN
    skipped = sum(r.status == Status.SKIPPED for r in reports)
    verdict = ("NOT CLEAN" if not ok else f"CUT ({len(reports)} of {len(todo)} cases ran, no error in them)" if cut
               else f"NOT CLEAN ({skipped} of {len(todo)} cases skipped: not run under the sanitizer)" if skipped
               else "CLEAN")
    print(f"sanitizer {spec.sanitizer} ({spec.impl}, {spec.topology}, W={spec.world_size}): {verdict} "
          f"(logs in {pool.logdir})")
    return ok and not cut and not skipped


if __name__ == "__main__":
    sys.exit(main())
