"""Sanitizer mode: a few small cases with every rank under NVIDIA compute-sanitizer.

    python -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 2 [--tool memcheck|racecheck|synccheck]
                            [--paths all|split|cluster [--paths-only]] [--time-limit S] [--only-ours]

The ranks run as ``compute-sanitizer --tool=T --log-file=<pool logdir>/sanitizer-<pid>.log python -m
fuzz.rank_worker`` (host API errors are not reported: CuTe DSL's architecture probe makes some on
purpose). The cases (compute at unaligned M with exact inputs, alternation, a late rank, a rejected
call, a graph replay) run as usual -- with ``--paths``, also the gate's cases of the kernel paths the
implementation declares (``all``, or ``split``: the fused kernel's split-K ones, labelled ``split-K``, or
``cluster``: the fused kernel's clustered tiles, whose CTAs fill each other's shared memory;
:func:`fuzz.strategies.path_cases`); then the pool is closed so every sanitizer writes its summary, and
the verdict needs every rank's ``ERROR SUMMARY: 0 errors`` (racecheck: no hazard but in the library kernels
of :data:`LIBRARY_KERNELS`, which are listed) plus every case passed. Exit 0 / 1. With ``--time-limit``
no case starts past the limit; the pool is still closed, so the sanitizers report on what ran, and a run that left
a case out ends ``CUT`` (exit 1), never ``CLEAN``.

``--only-ours`` (racecheck): only the CuTe DSL kernels are instrumented (``--kernel-name kns=kernel_cutlass_``,
:data:`fuzz.race_canary.OURS`); cuBLAS's GEMMs of the oracle and the truth, most of a full racecheck run's time, run
uninstrumented. First the same compute-sanitizer command runs :mod:`fuzz.race_canary`, a kernel with a shared-memory
race on purpose: the verdict needs its hazard reported (a filter that matched nothing, or a racecheck that saw
nothing, would otherwise read CLEAN), and the canary's hazard is never counted against the implementation.
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

from .case import Case, PoolSpec
from .node import sanitizer_command
from .pool import RankPool
from .race_canary import CANARY, OURS

SMALL = dict(N=512, K=256, max_M=1024)


def cases(impl: str = "fused", world_size: int = 2, paths: str = "", paths_only: bool = False) -> list[Case]:
    """The small cases (none with ``paths_only``), then (``paths``: ``all``, ``split`` or ``cluster``) the declared
    paths' cases."""
    from .strategies import declared_paths, path_cases

    def chosen(path) -> bool:
        return (paths == "all" or (paths == "split" and "split-K" in path.label)
                or (paths == "cluster" and CLUSTER_LABEL.search(path.label) is not None))

    declared = [(i, p) for i, p in enumerate(declared_paths(impl, world_size)) if chosen(p)] if paths else []
    return ([] if paths_only else SMALL_CASES) + [c for i, p in declared for c in path_cases(p, i)]


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


def canary_heard(sanitizer: str, timeout_s: float = 300.0) -> tuple[bool, str]:
    """Run :mod:`fuzz.race_canary` under ``compute-sanitizer`` as the ranks run (``sanitizer``: ``TOOL[:SUBSTRING]``,
    :func:`fuzz.node.sanitizer_command`): (its hazard was reported, what to print: the canary's log or why not)."""
    logdir = tempfile.mkdtemp(prefix="gemm-rs-race-canary-")
    log = os.path.join(logdir, "canary.log")
    cmd = sanitizer_command(sanitizer, log) + [sys.executable, "-u", "-m", "fuzz.race_canary"]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.sanitize", description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="fused")
    ap.add_argument("--topology", default="shared-gpu", choices=("shared-gpu", "multi-gpu"))
    ap.add_argument("--world-sizes", dest="world_size", type=int, default=2, help="W (one)")
    ap.add_argument("--world-size", dest="world_size", type=int, help=argparse.SUPPRESS)  # old spelling
    ap.add_argument("--tool", default="memcheck")
    ap.add_argument("--paths", default="", choices=("", "all", "split", "cluster"),
                    help="also the cases of the implementation's declared kernel paths (split: the split-K ones; "
                         "cluster: the clustered tiles)")
    ap.add_argument("--paths-only", action="store_true",
                    help="only the declared paths' cases (racecheck is slow: the small cases can fill a time budget)")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="seconds after which no further case starts; the pool is still closed so the sanitizers "
                         "report on what ran, and the verdict is CUT (never CLEAN) when a case was left out")
    ap.add_argument("--only-ours", action="store_true",
                    help=f"racecheck: instrument only the CuTe DSL kernels (names containing {OURS}); the verdict "
                         "needs the race canary's hazard reported under the same command")
    ap.add_argument("--deadline", type=float, default=600.0, help="per case: sanitized kernels are slow")
    ap.add_argument("--close-grace", type=float, default=180.0, help="seconds the ranks get to exit and report")
    args = ap.parse_args(argv)
    if args.paths_only and not args.paths:
        ap.error("--paths-only needs --paths")
    if args.only_ours and args.tool != "racecheck":
        ap.error("--only-ours is a racecheck run's (its race canary is a shared-memory race)")
    if shutil.which("compute-sanitizer") is None:
        print("compute-sanitizer is not on PATH: sanitizer mode needs the CUDA toolkit")
        return 2
    sanitizer = f"{args.tool}:{OURS}" if args.only_ours else args.tool
    if args.only_ours:
        heard, said = canary_heard(sanitizer)
        print(said, flush=True)
        if not heard:
            print(f"sanitizer {sanitizer}: NOT CLEAN (the filtered run cannot be shown to see a race)")
            return 1
    spec = PoolSpec(impl=args.impl, topology=args.topology, world_size=args.world_size,
                    optimize=sys.flags.optimize, sanitizer=sanitizer)
    pool = RankPool(spec)
    reports = []
    started = time.monotonic()
    try:
        todo = cases(args.impl, args.world_size, args.paths, args.paths_only)
        if args.paths and len(todo) == len(cases(args.impl, args.world_size, "", args.paths_only)):
            print(f"--paths {args.paths}: {args.impl} declares no such kernel path at W={args.world_size}")
            return 2
        for case in todo:
            if args.time_limit and time.monotonic() - started > args.time_limit:
                break
            report = pool.run(case, deadline=args.deadline)
            reports.append(report)
            print(f"{report.status:>8}  {case.short()}", flush=True)
            if not report.status.ok:
                print(report.render())
    finally:
        pool.close(grace_s=args.close_grace)  # sanitizers write their summaries at exit: give them time
    library: list[str] = []
    sums = summaries(pool.logdir, library)
    for name, n in sums.items():
        print(f"{name}: {'no ERROR SUMMARY (process did not finish cleanly)' if n is None else f'{n} errors'}")
    for hazard in library:
        print(f"not counted (a library's kernel, LIBRARY_KERNELS): {hazard}")
    ok = (len(sums) == args.world_size and all(n == 0 for n in sums.values())
          and all(r.status.ok for r in reports))
    cut = len(reports) < len(todo)
    verdict = "NOT CLEAN" if not ok else f"CUT ({len(reports)} of {len(todo)} cases ran, no error in them)" if cut \
        else "CLEAN"
    print(f"sanitizer {sanitizer}: {verdict} (logs in {pool.logdir})")
    return 0 if ok and not cut else 1


if __name__ == "__main__":
    sys.exit(main())
