"""The mutation meta-test's runner: the fuzz suite against every planted-bug implementation of
:mod:`mutants.catalogue` (it must FAIL on each) and against the correct one (it must PASS).

    python -m mutants.meta [--optimize 0|1] [--profile ci|nightly] [--only NAME[,NAME]] [--jobs 2]

One run per (target, optimize level): a subprocess

    python [-O] -m pytest fuzz/ -x -q --impl mutants.catalogue:NAME --world-sizes 2 --topology cpu \
        -p no:cacheprovider -p mutants.stop_at_first_failure

with ``HYPOTHESIS_PROFILE`` set and ``GEMM_RS_REPORT_DIR`` pointing at a fresh folder, so every case the
suite ran is a JSON line (:mod:`fuzz.record`). The first case whose status is not ``passed`` is the
kill: the matrix shows which test and which property caught the mutant (the first failed check, or
``hang`` / ``died`` / ``error``), how many examples that test needed (its case records up to and including
the failing one), how many cases the whole run took, and the seconds. A mutant whose run passes
SURVIVED; a run that fails without a failing case record (collection error, crash of the harness) is an
ERROR — neither counts as a kill. Runs go through a pool of ``--jobs`` worker threads, each driving one
subprocess. Exit status 0 iff the kill rate is 100 % and the correct implementation passed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from .catalogue import CATALOGUE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The correct implementation every matrix also runs; it must pass under the very same settings.
CORRECT = "unfused"
#: World sizes every mutant also runs at in the nightly profile (one run per mutant and W).
NIGHTLY_WORLD_SIZES = (2, 3, 4)
#: Per-case deadline inside kill runs (a legitimate CPU case takes < 2 s; a hang costs this much).
KILL_CASE_DEADLINE_S = 30
#: Wall-clock limit of one kill run (the subprocess is killed past it: verdict TIMEOUT).
RUN_TIMEOUT_S = {"ci": 420, "nightly": 3600}
#: Examples per test of a mutant's nightly run (GEMM_RS_EXAMPLES; 4x ci, random): -x stops at the
#: first kill anyway, and a mutant that only bad calls catch should not wait for 640 compute examples.
#: The correct implementation's nightly run gets the full nightly profile.
NIGHTLY_MUTANT_EXAMPLES = 100

_LIVE: set[subprocess.Popen] = set()  # running kill runs, killed if the runner itself is stopped

# Environment of the calling pytest that must not leak into the child suite.
_SCRUB = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
          "PYTEST_ADDOPTS", "GEMM_RS_IMPL", "GEMM_RS_WORLD_SIZES", "GEMM_RS_TOPOLOGIES", "GEMM_RS_REPORT_DIR")


@dataclass(frozen=True)
class Target:
    name: str                       # matrix row
    impl: str                       # --impl spec
    world_sizes: tuple[int, ...]
    must: str                       # "fail" (a mutant) or "pass" (the correct implementation)
    topology: str = "cpu"           # shared-gpu for the fault-injected builds of the fused kernel


@dataclass
class Outcome:
    name: str
    optimize: int
    profile: str
    must: str
    verdict: str          # KILLED | SURVIVED | PASSED | FAILED | ERROR | TIMEOUT
    world_sizes: str
    test: str = ""        # the test that caught it, e.g. test_compute[W2]
    caught_by: str = ""   # first failed check name, or hang / died / error: ...
    examples: int = 0     # case records of that test up to and including the failing one
    cases: int = 0        # case records of the whole run
    seconds: float = 0.0
    returncode: int | None = None
    repro: str = ""
    detail: str = ""      # tail of the output when something is off

    @property
    def ok(self) -> bool:
        return self.verdict == ("KILLED" if self.must == "fail" else "PASSED")


def targets(only: list[str] | None = None, profile: str = "ci", include_correct: bool = True,
            gpu: bool = False) -> list[Target]:
    """The matrix rows. ``gpu``: the fault-injected builds of the fused kernel (mutants.kernel_faults) and
    its wrapper-level mutants (mutants.dimension_faults) on the shared-gpu topology, against the correct
    ``fused`` implementation."""
    if gpu:
        from .dimension_faults import WRAPPER_CATALOGUE
        from .kernel_faults import GPU_CATALOGUE

        catalogue, correct, topology = GPU_CATALOGUE + WRAPPER_CATALOGUE, "fused", "shared-gpu"
    else:
        catalogue, correct, topology = CATALOGUE, CORRECT, "cpu"
    specs = [s for s in catalogue if not only or s.name in only]
    if only:
        unknown = sorted(set(only) - {s.name for s in catalogue} - {correct})
        if unknown:
            raise SystemExit(f"unknown mutant(s) {unknown}; known: {[s.name for s in catalogue]}")
    out = []
    for s in specs:
        if profile == "nightly":  # one run per W: -x would otherwise stop at the first W that kills
            out += [Target(s.name, s.impl, (w,), "fail", topology)
                    for w in sorted(set(s.world_sizes) | set(NIGHTLY_WORLD_SIZES))]
        else:
            out.append(Target(s.name, s.impl, s.world_sizes, "fail", topology))
    if include_correct and (not only or correct in only or specs):
        ws = tuple(sorted({w for t in out for w in t.world_sizes} or {2}))
        out.insert(0, Target(f"{correct} (correct)", correct, ws, "pass", topology))
    return out


def command(target: Target, optimize: int) -> list[str]:
    py = [sys.executable] + (["-O"] if optimize else [])
    return py + ["-m", "pytest", "fuzz/", "-x", "-q", "--impl", target.impl,
                 "--world-sizes", ",".join(str(w) for w in target.world_sizes), "--topology", target.topology,
                 "-p", "no:cacheprovider", "-p", "mutants.stop_at_first_failure"]


def run_one(target: Target, optimize: int, profile: str = "ci", timeout: float | None = None) -> Outcome:
    timeout = timeout or RUN_TIMEOUT_S.get(profile, 600)
    report_dir = tempfile.mkdtemp(prefix="gemm-rs-kill-")
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(HYPOTHESIS_PROFILE=profile, GEMM_RS_REPORT_DIR=report_dir,
               PYTHONPATH=os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p))
    env.setdefault("GEMM_RS_CASE_DEADLINE", str(KILL_CASE_DEADLINE_S))
    if profile == "nightly" and target.must == "fail":
        env.setdefault("GEMM_RS_EXAMPLES", str(NIGHTLY_MUTANT_EXAMPLES))
    if optimize:
        env["PYTHONOPTIMIZE"] = str(optimize)
    else:
        env.pop("PYTHONOPTIMIZE", None)
    out = Outcome(target.name, optimize, profile, target.must, "ERROR", ",".join(map(str, target.world_sizes)))
    t0 = time.perf_counter()
    proc = subprocess.Popen(command(target, optimize), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    _LIVE.add(proc)
    try:
        text, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        text, _ = proc.communicate()
        timed_out = True
    finally:
        _LIVE.discard(proc)
    out.seconds = time.perf_counter() - t0
    out.returncode = proc.returncode
    try:
        rows = _records(report_dir)
    finally:
        shutil.rmtree(report_dir, ignore_errors=True)
    out.cases = len(rows)
    _classify(out, rows, text or "", timed_out)
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _records(report_dir: str) -> list[dict]:
    rows = []
    for path in glob.glob(os.path.join(report_dir, "cases-*.jsonl")):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    rows.sort(key=lambda r: r["time"])
    return rows


def _short_test(test_id: str) -> str:
    name = test_id.split("::")[-1]
    m = re.match(r"([^\[]+)\[.*-(W\d+)\]$", name)
    return f"{m.group(1)}[{m.group(2)}]" if m else name


def _classify(out: Outcome, rows: list[dict], text: str, timed_out: bool) -> None:
    first = next((i for i, r in enumerate(rows) if r["status"] not in ("passed", "skipped")), None)
    if first is not None:
        row = rows[first]
        out.test = _short_test(row["test"])
        out.examples = sum(1 for r in rows[: first + 1] if r["test"] == row["test"])
        out.caught_by = _caught_by(row, text)
        out.repro = row.get("repro", "")
    tail = "\n".join(text.strip().splitlines()[-25:])
    if timed_out:
        out.verdict, out.detail = "TIMEOUT", tail
    elif out.must == "fail":
        if first is not None and out.returncode not in (0, 5):
            out.verdict = "KILLED"
        elif out.returncode == 0:
            out.verdict = "SURVIVED"
        else:
            out.verdict, out.detail = "ERROR", tail
    elif out.returncode == 0 and first is None:
        out.verdict = "PASSED"
    else:
        out.verdict, out.detail = "FAILED", tail


def _caught_by(row: dict, text: str) -> str:
    status = row["status"]
    if status in ("hang", "died"):
        return status
    failed = [c for c in row.get("checks", []) if not c.get("passed") and not c.get("skipped")]
    if failed:
        return failed[0]["name"]
    if status == "error":
        m = re.search(r"rank \d+ raised:\n(.*?)(?:\nE\s+(?:rank \d+ raised|---|REPRO)|\Z)", text, re.S)
        last = ""
        if m:
            lines = [ln.removeprefix("E").strip() for ln in m.group(1).splitlines() if ln.strip()]
            last = lines[-1] if lines else ""
        return f"error: {last[:60]}" if last else "error"
    return status


def run_matrix(tgts: list[Target], optimize_levels=(0,), profile: str = "ci", jobs: int = 2,
               progress=None) -> list[Outcome]:
    work = [(t, o) for o in optimize_levels for t in tgts]
    ex = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [ex.submit(run_one, t, o, profile) for t, o in work]
    results = []
    try:
        for fut in futures:
            res = fut.result()
            results.append(res)
            if progress:
                progress(res)
    except BaseException:  # interrupted: no kill run may outlive the runner
        for fut in futures:
            fut.cancel()
        for proc in list(_LIVE):
            _kill_group(proc)
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    return results


def kill_rate(outcomes: list[Outcome]) -> tuple[int, int]:
    mutants = [o for o in outcomes if o.must == "fail"]
    return sum(o.verdict == "KILLED" for o in mutants), len(mutants)


def render(outcomes: list[Outcome], wall_s: float | None = None) -> str:
    head = ("mutant", "-O", "W", "verdict", "caught by (test :: property)", "examples", "cases", "seconds")
    rows = []
    for o in outcomes:
        where = f"{o.test} :: {o.caught_by}" if o.test else "-"
        rows.append((o.name, str(o.optimize), o.world_sizes, o.verdict, where,
                     str(o.examples) if o.test else "-", str(o.cases), f"{o.seconds:.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda r: "  ".join(c.ljust(widths[i]) if i in (0, 3, 4) else c.rjust(widths[i])  # noqa: E731
                               for i, c in enumerate(r))
    text = [line(head), line(tuple("-" * w for w in widths))] + [line(r) for r in rows]
    killed, total = kill_rate(outcomes)
    ex = [o.examples for o in outcomes if o.verdict == "KILLED"]
    summary = f"kill rate: {killed}/{total}" + (f" ({100.0 * killed / total:.0f}%)" if total else "")
    if ex:
        summary += f"; examples to detect: median {statistics.median(ex):g}, max {max(ex)}"
    correct = [o for o in outcomes if o.must == "pass"]
    if correct:
        summary += "; correct implementation: " + ", ".join(f"-O{o.optimize} {o.verdict}" for o in correct)
    total_s = sum(o.seconds for o in outcomes)
    summary += f"; run time {total_s:.0f} s" + (f" (wall {wall_s:.0f} s)" if wall_s is not None else "")
    text.append(summary)
    for o in outcomes:
        if not o.ok and o.detail:
            text.append(f"--- {o.name} -O{o.optimize}: {o.verdict} (rc {o.returncode}) ---\n{o.detail}")
    return "\n".join(text)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mutants.meta", description=__doc__.splitlines()[0])
    ap.add_argument("--optimize", choices=("0", "1", "both"), default="both",
                    help="python optimize level of the suite (and its ranks); default both")
    ap.add_argument("--profile", choices=("ci", "nightly"), default="ci")
    ap.add_argument("--only", default=None, help="comma list of mutant names (and/or 'unfused')")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    ap.add_argument("--no-correct", action="store_true", help="skip the run on the correct implementation")
    ap.add_argument("--json", default=None, help="also write the outcomes as JSON to this path")
    ap.add_argument("--gpu", action="store_true",
                    help="the fault-injected builds of the fused kernel on shared-gpu (needs a Hopper GPU)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # a stopped runner stops its kill runs too
    levels = (0, 1) if args.optimize == "both" else (int(args.optimize),)
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    tgts = targets(only, args.profile, include_correct=not args.no_correct, gpu=args.gpu)
    t0 = time.perf_counter()

    def progress(o: Outcome) -> None:
        print(f"[{time.perf_counter() - t0:6.0f}s] {o.name} -O{o.optimize}: {o.verdict} "
              f"{o.test} {o.caught_by} ({o.seconds:.1f}s)", file=sys.stderr, flush=True)

    outcomes = run_matrix(tgts, levels, args.profile, args.jobs, progress)
    print(render(outcomes, time.perf_counter() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(o) for o in outcomes], f, indent=1)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
