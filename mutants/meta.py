"""The mutation meta-test's runner: the fuzz suite against every planted-bug implementation of
:mod:`mutants.catalogue` (it must FAIL on each) and against the correct one (it must PASS).

    python -m mutants.meta [--optimize 0|1|both] [--profile ci|nightly] [--impl NAME[,NAME]] [--jobs 2]
                           [--world-sizes 2,4] [--report-dir DIR]

Per optimize level (and world-size set) the targets are dealt over ``--jobs`` pytest sessions that run
at once, each a single process going through its targets one after the other:

    python [-O] -m pytest fuzz/ -q -n 0 --impl unfused,mutants.catalogue:A,mutants.catalogue:C,... \\
        --world-sizes 2 --topology cpu -p no:cacheprovider -p mutants.stop_at_first_failure

with ``HYPOTHESIS_PROFILE`` set, ``GEMM_RS_REPORT_DIR`` pointing at a fresh folder and no example database
(``GEMM_RS_HYPOTHESIS_DB=none``: the matrix never depends on what earlier runs stored, and planted bugs
store nothing). The plugin
(:mod:`mutants.stop_at_first_failure`) stops each target at its first failing test and records every
test's outcome; every case is a JSON line (:mod:`fuzz.record`). One Python start-up per session instead
of one pytest per mutant; a target's rank pool lives only while its tests run (fuzz/conftest.py).

Classification (:func:`classify`), from the case records and the test outcomes of each target:

* KILLED    — the first case that did not pass was caught by a property (FAILED: a check failed,
  ``call_raised`` included) or by the liveness watchdog (HANG, DIED), and pytest failed that test;
* SURVIVED  — every test passed or was skipped, at least one case passed, nothing failed;
* ERROR     — anything else: a harness error (a case whose status is ERROR: an exception escaped
  ``run_case``), a test that failed without a failing case (collection error, pool that would not
  start, Hypothesis health check), a pytest internal / usage error or interruption, a session past its
  time limit, nothing checked, cases whose driver or ranks ran at another optimize level than the session
  was asked for (:func:`_optimize_mismatch`; the correct implementation too), or a first failing case whose
  only failed check is ``main_path_available`` (the host cannot build the implementation's main path, so no
  case ran it: on a GPU host without the CuTe DSL every kernel fault would otherwise read KILLED). Never a kill.

The correct implementation is PASSED (everything passed) or FAILED (ERROR: at another optimize level). The
matrix shows which test and which properties caught each mutant beside the properties the catalogue expects
(``MutantSpec.expected``) and flags a mismatch; how many examples that test needed (its case records up to and
including the failing one), whether the failure reproduced on a fresh pool, and the seconds. Exit status 0 iff every
mutant was killed -- or, a GPU fault build whose bug is a race ranks time-slicing one GPU rarely open
(``GpuMutantSpec.race``), survived: listed as SURVIVED with a RACE line naming its static check, never counted
as a kill -- and every control passed (``ci/kill-matrix`` runs it as the nightly pipelines do).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from enum import StrEnum

from fuzz import config
from fuzz.node import killpg_while_alive
from fuzz.status import Status
from fuzz.verdict import only_the_host_failed

from .catalogue import CATALOGUE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The correct implementation every matrix also runs; it must pass under the very same settings.
CORRECT = "unfused"
#: World sizes every mutant also runs at in the nightly profile (one target per mutant and W).
NIGHTLY_WORLD_SIZES = (2, 3, 4)
#: Per-case deadline inside kill sessions (a hang costs this much). A CPU case of the ci profile takes 0.1-10 s; on
#: an overloaded 2-core CI machine (21st session: every kill session 2x slower) the fifth test_compute example at
#: W = 2 passed 30 s -- a false "hang" of the correct implementation (the control failed, so .ci/run went red,
#: and three mutants were "killed" by it). A mutant that really hangs costs the longer deadline, rarely.
KILL_CASE_DEADLINE_S = 90
#: Wall-clock limit of a kill session: a base plus this much per target per worker (then: ERROR).
SESSION_TIMEOUT_S = {"ci": (300, 120), "nightly": (1800, 900)}
#: Examples per test of a mutant's nightly run (--examples; 4x ci, random): a mutant stops at its
#: first catch anyway, and one that only bad calls catch should not wait for 640 compute examples.
#: The correct implementation's nightly session gets the full nightly profile.
NIGHTLY_MUTANT_EXAMPLES = 100

_LIVE: dict[subprocess.Popen, int] = {}  # running kill sessions -> pidfd; killed if the runner is stopped

# Environment of the calling pytest (and the settings this runner decides per session) that must not leak
# into the child suite.
_SCRUB = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
          "PYTEST_ADDOPTS", *(config.BY_NAME[n].env for n in ("impl", "world_sizes", "topology", "report_dir",
                                                               "profile", "jobs", "nnodes")),
          *config.BY_NAME["topology"].env_aliases)


class Verdict(StrEnum):
    KILLED = "KILLED"      # a mutant caught by a property or the watchdog
    SURVIVED = "SURVIVED"  # a mutant the suite passed
    PASSED = "PASSED"      # the correct implementation passed
    FAILED = "FAILED"      # the correct implementation failed
    ERROR = "ERROR"        # the harness could not say: never a kill, never a pass


@dataclass(frozen=True)
class Target:
    name: str                       # matrix row
    impl: str                       # --impl spec
    world_sizes: tuple[int, ...]
    must: str                       # "fail" (a mutant) or "pass" (the correct implementation)
    topology: str = "cpu"           # shared-gpu for the fault-injected builds of the fused kernel
    expected: tuple[str, ...] = ()  # properties (or hang / died) the catalogue expects to catch it
    tests: tuple[str, ...] = ()     # tests to run first (MutantSpec.tests)
    scope: tuple[str, ...] = ()     # the only tests its session runs (set by _scoped; () = all of fuzz/)
    race: str = ""                  # a GPU fault build's race one GPU rarely opens (GpuMutantSpec.race), or ""
    strict: bool = False            # a kill by none of ``expected`` fails the row (see Outcome.ok)

    def gate_ids(self) -> set[str]:
        return {f"{self.impl}-{self.topology}-W{w}" for w in self.world_sizes}


@dataclass
class Outcome:
    name: str
    optimize: int
    profile: str
    must: str
    verdict: Verdict
    world_sizes: str
    expected: tuple[str, ...] = ()
    test: str = ""                   # the test that caught it, e.g. test_compute[W2]
    caught_by: tuple[str, ...] = ()  # the failed properties of the first failing case, or (hang,) / (died,)
    examples: int = 0                # case records of that test up to and including the failing one
    cases: int = 0                   # case records of the target
    seconds: float = 0.0
    reproducibility: str = ""        # of the failure, re-run on a fresh pool: reproducible / flaky
    repro: str = ""
    detail: str = ""                 # why, when something is off
    race: str = ""                   # Target.race: a survivor the matrix names but does not fail on (see ok)
    strict: bool = False             # Target.strict: a kill by another property than expected fails the row

    @property
    def ok(self) -> bool:
        """The row does not fail the matrix: a mutant killed, the correct implementation passed -- or a GPU fault
        build whose bug is a race that ranks time-slicing one GPU rarely open, surviving: listed as SURVIVED and
        left out of the kill rate's numerator all the same, each caught statically by the pinned PTX (its
        ``race`` names the test). Without that, a nightly GPU matrix could never be green on one GPU, and a
        regression of the others (the ``bf16_parts`` build got through for two days, 22nd session) went unseen.

        A strict row (the CPU catalogue at the ci profile: :func:`_targets_of`) killed by none of its expected
        properties fails too: each mutant has several routes to its kill, so a check wired to the wrong thing left
        the matrix at 100 % while the mutant built for that check died of another (36th session's audit of
        fuzz/families/: 26 such plants). The GPU matrix's mismatches are listed, not failed: its rows run
        ``test_counter_wrap`` first (:func:`kill_order`), whose generic checks often catch a kernel fault before the
        property named, and a race's catch varies (a device fault, a hang or a wrong result: one H100, 2026-12-05)."""
        if self.must == "fail" and self.verdict == Verdict.SURVIVED and self.race:
            return True
        if self.strict and self.as_expected is False:
            return False
        return self.verdict == (Verdict.KILLED if self.must == "fail" else Verdict.PASSED)

    @property
    def as_expected(self) -> bool | None:
        """Whether a catching property is one the catalogue expects (None: not killed, or none expected)."""
        if self.verdict != Verdict.KILLED or not self.expected:
            return None
        return bool(set(self.expected) & set(self.caught_by))


def targets(only: list[str] | None = None, profile: str = "ci", include_correct: bool = True,
            gpu: bool = False) -> list[Target]:
    """The matrix rows. ``gpu``: the fault-injected builds of the fused kernel (mutants.kernel_faults) and
    its wrapper-level mutants (mutants.dimension_faults) on the shared-gpu topology, against the correct
    ``fused`` implementation, and the unfused path's GPU-only mutants (``GPU_UNFUSED_CATALOGUE``) against it."""
    if gpu:
        from .catalogue import GPU_UNFUSED_CATALOGUE
        from .dimension_faults import WRAPPER_CATALOGUE
        from .kernel_faults import GPU_CATALOGUE

        # each mutant against its own correct implementation: the fused kernel's faults against it, the unfused
        # path's GPU-only bugs (its host staging) against the unfused path
        groups = [(GPU_CATALOGUE + WRAPPER_CATALOGUE, "fused"), (GPU_UNFUSED_CATALOGUE, CORRECT)]
        topology = "shared-gpu"
    else:
        groups, topology = [(CATALOGUE, CORRECT)], "cpu"
    extra = GPU_EXTRA_CONTROLS if gpu else {}
    if only:
        known = {s.name for catalogue, _ in groups for s in catalogue} | {correct for _, correct in groups} | set(extra)
        unknown = sorted(set(only) - known)
        if unknown:
            raise SystemExit(f"unknown mutant(s) {unknown}; known: {sorted(known)}")
    out = []
    for catalogue, correct in groups:
        out += _targets_of(catalogue, correct, topology, only, profile, include_correct)
    for name, (impl, sizes, why) in extra.items():
        if include_correct and (not only or name in only):
            out.append(Target(f"{name} (correct: {why})", impl, sizes, "pass", topology))
    return _scoped(out)


#: Correct implementations beside the controls in the GPU matrix: each must PASS the gate as the control does. The
#: wrapper running the kernel on its own stream the way the contract says is the stream mutants' control -- a check
#: taking the allocator's bookkeeping for a write, or a stream wait for a hazard, fails it (it ran by hand until the
#: 37th session: `--impl mutants.dimension_faults:FusedOnItsOwnStream`, 34th session).
GPU_EXTRA_CONTROLS = {"FusedOnItsOwnStream": ("mutants.dimension_faults:FusedOnItsOwnStream", (2,),
                                              "the kernel on its own stream")}


def _targets_of(catalogue, correct: str, topology: str, only: list[str] | None, profile: str,
                include_correct: bool) -> list[Target]:
    """The rows of one catalogue: its mutants (``only``: those named), then the control -- ``correct`` -- at each
    of their world-size sets (where any mutant, or the control itself, is asked for)."""
    specs = [s for s in catalogue if not only or s.name in only]
    out = []
    for s in specs:
        # strict: the CPU catalogue at the ci profile (property names; derandomized cases on gloo: the same catch on
        # every run). Nightly's random draws may first reach a mutant where its named property has nothing to see;
        # the GPU catalogues run test_counter_wrap first, whose generic checks often catch a fault before the one named
        expected = _expected(s.expected)
        strict = topology == "cpu" and profile == "ci" and not isinstance(s.expected, str)
        if profile == "nightly":  # one target per W: each W must kill it on its own (from the spec's smallest W:
            # a bug of groups of 4 or more ranks cannot show at 2)
            out += [Target(s.name, s.impl, (w,), "fail", topology, expected, s.tests, race=getattr(s, "race", ""),
                           strict=strict)
                    for w in sorted(set(s.world_sizes) | {n for n in NIGHTLY_WORLD_SIZES if n >= min(s.world_sizes)})]
        else:
            out.append(Target(s.name, s.impl, s.world_sizes, "fail", topology, expected, s.tests,
                              race=getattr(s, "race", ""), strict=strict))
    if include_correct and (not only or correct in only or specs):
        # the control at each world-size set of the mutants, in their sessions (_sessions: the same tests)
        sets = sorted({t.world_sizes for t in out} or {(2,)})
        for ws in reversed(sets):
            name = f"{correct} (correct)" + (f" W={','.join(map(str, ws))}" if len(sets) > 1 else "")
            out.insert(0, Target(name, correct, ws, "pass", topology))
    return out


def _scoped(tgts: list[Target]) -> list[Target]:
    """``tgts`` with their scope: a world-size set whose every mutant names its tests (``MutantSpec.tests``: a bug
    only groups of 4 or more ranks show, caught by a fixed test) runs only those tests, its control (the correct
    implementation at that set) the same ones, and says so in its name (the matrix shows which tests it passed):
    at the ci profile's W = 4 the control's run of every test (45 s of the CI machine) served one fixed case."""
    sets: dict[tuple, list[Target]] = defaultdict(list)
    for t in tgts:
        sets[(t.world_sizes, t.topology)].append(t)
    scopes = {}
    for key, members in sets.items():
        mutants = [t for t in members if t.must == "fail"]
        if mutants and all(t.tests for t in mutants):
            scopes[key] = tuple(dict.fromkeys(name for t in mutants for name in t.tests))
    out = []
    for t in tgts:
        scope = scopes.get((t.world_sizes, t.topology), ())
        name = f"{t.name} ({', '.join(scope)} only)" if scope and t.must == "pass" else t.name
        out.append(dataclasses.replace(t, scope=scope, name=name))
    return out


def _expected(value) -> tuple[str, ...]:
    """The expected properties: the catalogue's tuple, or (GPU catalogue, stated in words) the property
    names its text mentions."""
    if isinstance(value, str):
        return tuple(dict.fromkeys(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", value)))
    return tuple(value)


# --- running sessions ---------------------------------------------------------------------------------


def command(tgts: list[Target], optimize: int) -> list[str]:
    py = [sys.executable] + (["-O"] if optimize else [])
    impls = ",".join(dict.fromkeys(t.impl for t in tgts))
    sizes = ",".join(str(w) for w in sorted({w for t in tgts for w in t.world_sizes}))
    topologies = ",".join(sorted({t.topology for t in tgts}))
    scopes = {t.scope for t in tgts}
    if len(scopes) != 1:
        raise ValueError(f"one session, one scope of tests: {sorted(scopes)}")
    (scope,) = scopes
    return py + ["-m", "pytest", "fuzz/", "-q", "-n", "0", "--impl", impls,
                 "--world-sizes", sizes, "--topology", topologies, "-p", "no:cacheprovider",
                 "-p", "mutants.stop_at_first_failure", *(["-k", " or ".join(scope)] if scope else [])]


#: The test whose family checks a property (any other: test_compute): a mutant's expected properties pick
#: which of its tests run first in a kill session (mutants/stop_at_first_failure.py); all of them still run
#: until one catches it.
PROPERTY_TEST = {"capacity_rejected": "test_capacity", "bad_call_rejected": "test_bad_call",
                 "graph_replay": "test_graph_replay", "graph_replay_exact": "test_graph_replay",
                 "should_run_stable": "test_layers", "dispatch_agrees_across_ranks": "test_layers",
                 "other_instances_untouched": "test_layers", "dispatch_graph_replay": "test_layers",
                 "stream_ordered_result": "test_streams", "stream_ordered_exact": "test_streams",
                 "stream_ordered_padding": "test_streams", "call_raised": "test_layers",
                 "memory_bounded": "test_layers", "released_on_close": "test_layers",
                 "padded_rows_untouched": "test_shard_boundaries"}


def kill_order(tgts: list[Target]) -> dict[str, list[str]]:
    """impl -> the tests to run first: ``test_counter_wrap`` where the implementation keeps a call counter and
    ``test_kernel_paths`` where it declares kernel paths (fixed cases: the cheapest catch of a bug at the wrap or
    on one path), then the tests its catalogue row names (``MutantSpec.tests``), then those of its expected
    properties, in the catalogue's order."""
    from fuzz.strategies import declared_counter_bits, declared_paths

    order = {}
    for t in tgts:
        first = ["test_counter_wrap"] if declared_counter_bits(t.impl) else []
        first += ["test_kernel_paths"] if any(declared_paths(t.impl, w) for w in t.world_sizes) else []
        first += list(t.tests) + [PROPERTY_TEST.get(e, "test_compute") for e in t.expected]
        if first:
            order[t.impl] = list(dict.fromkeys(first))
    return order


#: Relative cost of the correct implementation's run (every example of every test) to a mutant's.
CORRECT_WEIGHT = 6


def _sessions(tgts: list[Target], profile: str, jobs: int) -> list[list[Target]]:
    """Targets that can share one pytest session (same world sizes, topology, examples override and scope),
    dealt over ``jobs`` sessions of about equal cost, the costliest target first."""
    groups: dict[tuple, list[Target]] = defaultdict(list)
    for t in tgts:
        groups[(t.world_sizes, t.topology, _examples_override(t, profile), t.scope)].append(t)
    out = []
    for group in groups.values():
        # a scoped set (:func:`_scoped`) is a few fixed cases: one session (a session's start costs about as much)
        n_bins = 1 if group[0].scope else max(1, min(jobs, len(group)))
        bins: list[tuple[int, list[Target]]] = [(0, []) for _ in range(n_bins)]
        for t in sorted(group, key=lambda t: t.must != "pass"):  # stable: catalogue order otherwise
            load, members = min(bins, key=lambda b: b[0])
            bins.remove((load, members))
            bins.append((load + (CORRECT_WEIGHT if t.must == "pass" else 1), members + [t]))
        out += [members for _, members in bins if members]
    return out


def _examples_override(target: Target, profile: str) -> str | None:
    return str(NIGHTLY_MUTANT_EXAMPLES) if profile == "nightly" and target.must == "fail" else None


def run_session(tgts: list[Target], optimize: int, profile: str = "ci", timeout: float | None = None) -> list[Outcome]:
    """One pytest session over ``tgts`` (same world sizes and topology); an outcome per target."""
    base, per_target = SESSION_TIMEOUT_S.get(profile, SESSION_TIMEOUT_S["ci"])
    timeout = timeout or base + per_target * len(tgts)
    report_dir = tempfile.mkdtemp(prefix="gemm-rs-kill-")
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    setting = {n: config.BY_NAME[n].env for n in ("report_dir", "hypothesis_db", "case_deadline", "examples")}
    env.update({"HYPOTHESIS_PROFILE": profile, setting["report_dir"]: report_dir, setting["hypothesis_db"]: "none",
                "PYTHONPATH": os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)})
    env.setdefault(setting["case_deadline"], str(KILL_CASE_DEADLINE_S))
    env[config.KILL_ORDER_ENV] = json.dumps(kill_order(tgts))
    override = _examples_override(tgts[0], profile)
    if override:
        env.setdefault(setting["examples"], override)
    if optimize:
        env["PYTHONOPTIMIZE"] = str(optimize)
    else:
        env.pop("PYTHONOPTIMIZE", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(command(tgts, optimize), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    leader = os.pidfd_open(proc.pid)  # not reaped yet: this is our session's leader
    _LIVE[proc] = leader
    try:
        text, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc, leader)
        text, _ = proc.communicate()
        timed_out = True
    finally:
        del _LIVE[proc]
        os.close(leader)
    wall = time.perf_counter() - t0
    try:
        rows, tests = _jsonl(report_dir, "cases-*.jsonl"), _jsonl(report_dir, "outcomes-*.jsonl")
    finally:
        shutil.rmtree(report_dir, ignore_errors=True)
    session = SessionResult(proc.returncode, timed_out, timeout, text or "", wall)
    return [classify(t, optimize, profile, rows, tests, session) for t in tgts]


def run_one(target: Target, optimize: int, profile: str = "ci", timeout: float | None = None) -> Outcome:
    return run_session([target], optimize, profile, timeout=timeout)[0]


def _kill_group(proc: subprocess.Popen, leader: int) -> None:
    """SIGTERM then SIGKILL to a kill session's process group, only while its leader (pinned by the pidfd
    ``leader``) is alive, so the group id is provably still the session's."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not killpg_while_alive(leader, proc.pid, sig):
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _jsonl(report_dir: str, pattern: str) -> list[dict]:
    rows = []
    for path in glob.glob(os.path.join(report_dir, pattern)):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a session killed for time
    return rows


# --- classification ---------------------------------------------------------------------------------


@dataclass
class SessionResult:
    returncode: int | None
    timed_out: bool
    timeout: float
    text: str
    wall_s: float


def _gate_id(test_id: str) -> str:
    """``fuzz/test_gemm_rs.py::test_compute[m:X-cpu-W2]@gate-...`` -> ``m:X-cpu-W2``."""
    m = re.search(r"\[(.*)\](?:@[^\]]*)?$", test_id)
    return m.group(1) if m else ""


def _short_test(test_id: str) -> str:
    name = test_id.split("::")[-1].split("@")[0]
    m = re.match(r"([^\[]+)\[.*-(W\d+)\]$", name)
    return f"{m.group(1)}[{m.group(2)}]" if m else name


def outcomes_by_test(lines: list[dict]) -> dict[str, dict]:
    """Per test id: ``outcome`` (passed / failed / error / skipped), total ``duration``, first ``message``
    of a failure or skip, from the plugin's per-phase lines."""
    out: dict[str, dict] = {}
    for ln in lines:
        t = out.setdefault(ln["test"], {"outcome": "passed", "duration": 0.0, "message": "", "call": False})
        t["duration"] += ln.get("duration", 0.0)
        t["call"] = t["call"] or ln["when"] == "call"
        if ln["outcome"] == "failed":
            t["outcome"] = "failed" if ln["when"] == "call" else "error"
            t["message"] = t["message"] or ln.get("message", "")
        elif ln["outcome"] == "skipped" and t["outcome"] == "passed":
            t["outcome"] = "skipped"
            t["message"] = ln.get("message", "")
    return out


def classify(target: Target, optimize: int, profile: str, rows: list[dict], lines: list[dict],
             session: SessionResult) -> Outcome:
    """The verdict on one target from its case records and test outcomes (see the module docstring)."""
    ids = target.gate_ids()
    rows = sorted((r for r in rows if _gate_id(r["test"]) in ids), key=lambda r: r["time"])
    tests = {k: v for k, v in outcomes_by_test(lines).items() if _gate_id(k) in ids}
    out = Outcome(target.name, optimize, profile, target.must, Verdict.ERROR, ",".join(map(str, target.world_sizes)),
                  expected=target.expected, cases=len(rows), seconds=sum(t["duration"] for t in tests.values()),
                  race=target.race, strict=target.strict)
    first = next((r for r in rows if not Status(r["status"]).ok), None)
    if first is not None:
        out.test = _short_test(first["test"])
        out.examples = sum(1 for r in rows[: rows.index(first) + 1] if r["test"] == first["test"])
        out.caught_by = _caught_by(first)
        out.repro = first.get("repro", "")
        out.reproducibility = next((r["reproducibility"] for r in rows
                                    if r["test"] == first["test"] and r.get("reproducibility")), "")
    harness = _harness_failure(session, tests, rows, first)
    host = _host_cannot_build(first)
    level = _optimize_mismatch(rows, optimize)
    if level:  # the run said something about another level than asked: never a kill, never a pass
        out.detail = level
    elif target.must == "fail":
        if first is not None and Status(first["status"]).caught and not host and \
                tests.get(first["test"], {}).get("outcome") == "failed":
            out.verdict = Verdict.KILLED
        elif host or harness:
            out.detail = host or harness
        else:
            out.verdict = Verdict.SURVIVED
    elif harness or first is not None:
        out.verdict, out.detail = Verdict.FAILED, harness or f"{first['status']} in {out.test}: {out.repro}"
    else:
        out.verdict = Verdict.PASSED
    if not out.ok and not out.detail and session.text.strip():
        out.detail = "\n".join(session.text.strip().splitlines()[-25:])
    return out


def _harness_failure(session: SessionResult, tests: dict[str, dict], rows: list[dict], first: dict | None) -> str:
    """Why this target's run says nothing trustworthy ("" when it does), short of a kill."""
    if session.timed_out:
        return f"the kill session ran past its {session.timeout:.0f}s limit and was killed"
    if session.returncode not in (0, 1):
        return f"pytest exited {session.returncode} (interrupted, internal error, usage error or no tests)"
    if not tests:
        return "no test of this target ran"
    if first is not None and Status(first["status"]) == Status.ERROR:
        return f"harness error in {_short_test(first['test'])}: {_raised(first)}"
    if first is not None:  # (a caught case whose test pytest failed: a finding, no harness failure)
        if tests.get(first["test"], {}).get("outcome") == "failed":
            return ""
        return f"{first['status']} case, but pytest did not fail {_short_test(first['test'])}"
    bad = [f"{_short_test(k)}: {v['outcome']} ({v['message']})" for k, v in tests.items()
           if v["outcome"] in ("failed", "error")]
    if bad:
        return "test failed without a failing case: " + "; ".join(bad)
    if not any(Status(r["status"]) == Status.PASSED for r in rows):
        return "nothing checked: no case passed (every case skipped, or none ran)"
    return ""


def _optimize_mismatch(rows: list[dict], optimize: int) -> str:
    """Why this target's cases ran at another optimize level than the session was asked for ("" when they did not):
    a driver (``driver_optimize``) at another level than ``optimize`` -- a caller's ``PYTHONOPTIMIZE`` leaking into a
    -O0 session, say -- or a rank (``rank_optimize``) at another level than its pool was started at (the row's
    ``optimize``: the session's, or 1 where a test starts -O ranks on purpose). CapacityAsAssert "killed at -O0" by a
    session that ran at -O1 is no kill at -O0. A record without these fields (or a rank that never reported) is not
    held against the run."""
    wrong = []
    for r in rows:
        driver = r.get("driver_optimize")
        if driver is not None and driver != optimize:
            wrong.append(f"{_short_test(r['test'])}: the pytest driver ran at -O{driver}")
        pool = r.get("optimize")
        pool = optimize if pool is None else pool
        off = {k: v for k, v in (r.get("rank_optimize") or {}).items() if v is not None and v != pool}
        if off:
            levels = "/".join(f"-O{v}" for v in sorted(set(off.values())))
            wrong.append(f"{_short_test(r['test'])}: ranks {sorted(off)} ran at {levels}, their pool at -O{pool}")
    if not wrong:
        return ""
    return (f"the session was asked for -O{optimize} but ran at another level (" + "; ".join(dict.fromkeys(wrong))[:400]
            + "): nothing was learned at -O" + str(optimize))


def _host_cannot_build(first: dict | None) -> str:
    """Why the first failing case says nothing about the implementation ("" when it does): it failed only
    ``main_path_available`` (fuzz/verdict.py), the host cannot build the main path, so no case ran it -- every
    mutant of that implementation would read KILLED on such a host, caught by nothing but the host."""
    if first is None or Status(first["status"]) != Status.FAILED or first.get("errors"):
        return ""
    failed = [c for c in first.get("checks", []) if not c.get("passed") and not c.get("skipped")]
    if not only_the_host_failed(failed):
        return ""
    why = next((c.get("detail", "") for c in failed if c.get("detail")), "")
    return (f"the host cannot build the implementation's main path ({_short_test(first['test'])}: {why}): no case "
            f"ran it, nothing was learned about the mutant")


def _caught_by(row: dict) -> tuple[str, ...]:
    status = Status(row["status"])
    if status in (Status.HANG, Status.DIED):
        return (str(status),)
    failed = [c["name"] for c in row.get("checks", []) if not c.get("passed") and not c.get("skipped")]
    return tuple(dict.fromkeys(failed)) or (str(status),)


def _raised(row: dict) -> str:
    """What the ranks of an ERROR case raised (each distinct exception line with its ranks: the line above a rank's
    call trail, not the trail's last call, which the matrix showed alone until the 22nd session), else the note."""
    from fuzz.summary import raised_by_ranks

    return raised_by_ranks(row.get("errors") or {})[:400] or _last_line(row)


def _last_line(row: dict) -> str:
    for tb in row.get("errors", {}).values():
        lines = [ln.strip() for ln in tb.splitlines() if ln.strip()]
        if lines:
            return lines[-1][:120]
    return row.get("note", "").strip().splitlines()[0][:120] if row.get("note", "").strip() else "no detail"


# --- the matrix ---------------------------------------------------------------------------------------


def run_matrix(tgts: list[Target], optimize_levels=(0,), profile: str = "ci", jobs: int = 2,
               progress=None) -> list[Outcome]:
    """Every target at every level: per level, ``jobs`` sessions at once (see :func:`_sessions`)."""
    results: dict[tuple[str, str, int], Outcome] = {}
    work = [(level, group) for level in optimize_levels for group in _sessions(tgts, profile, jobs)]
    ex = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [ex.submit(run_session, group, level, profile) for level, group in work]
    try:
        for fut in futures:
            for o in fut.result():
                results[(o.name, o.world_sizes, o.optimize)] = o
                if progress:
                    progress(o)
    except BaseException:  # interrupted: no kill session may outlive the runner
        for fut in futures:
            fut.cancel()
        for proc, leader in list(_LIVE.items()):
            _kill_group(proc, leader)
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    return [results[(t.name, ",".join(map(str, t.world_sizes)), level)] for level in optimize_levels for t in tgts]


def kill_rate(outcomes: list[Outcome]) -> tuple[int, int]:
    mutants = [o for o in outcomes if o.must == "fail"]
    return sum(o.verdict == Verdict.KILLED for o in mutants), len(mutants)


def render(outcomes: list[Outcome], wall_s: float | None = None) -> str:
    head = ("mutant", "-O", "W", "verdict", "caught by (test :: properties)", "expected", "match", "examples",
            "rerun", "cases", "seconds")
    rows = []
    for o in outcomes:
        where = f"{o.test} :: {', '.join(o.caught_by)}" if o.test else "-"
        match = {None: "-", True: "yes", False: "MISMATCH"}[o.as_expected]
        rows.append((o.name, str(o.optimize), o.world_sizes, str(o.verdict), where, ", ".join(o.expected) or "-",
                     match, str(o.examples) if o.test else "-", o.reproducibility or "-", str(o.cases),
                     f"{o.seconds:.1f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    left = (0, 3, 4, 5, 6, 8)
    line = lambda r: "  ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i])  # noqa: E731
                               for i, c in enumerate(r))
    text = [line(head), line(tuple("-" * w for w in widths))] + [line(r) for r in rows]
    killed, total = kill_rate(outcomes)
    ex = [o.examples for o in outcomes if o.verdict == Verdict.KILLED]
    summary = f"kill rate: {killed}/{total}" + (f" ({100.0 * killed / total:.0f}%)" if total else "")
    errors = sum(o.verdict == Verdict.ERROR for o in outcomes)
    if errors:
        summary += f"; {errors} ERROR (harness, not a kill)"
    if ex:
        summary += f"; examples to detect: median {statistics.median(ex):g}, max {max(ex)}"
    mismatched = [o for o in outcomes if o.as_expected is False]
    if mismatched:
        failing = sum(o.strict for o in mismatched)
        summary += (f"; {len(mismatched)} caught by another property than expected"
                    + (f" ({failing} of them fail the matrix: their expected properties are named)" if failing else ""))
    correct = [o for o in outcomes if o.must == "pass"]
    if correct:
        summary += "; correct implementation: " + ", ".join(
            f"-O{o.optimize}{f' W={o.world_sizes}' if len(correct) > 1 else ''} {o.verdict}" for o in correct)
    total_s = sum(o.seconds for o in outcomes)
    summary += f"; test time {total_s:.0f} s" + (f" (wall {wall_s:.0f} s)" if wall_s is not None else "")
    raced = [o for o in outcomes if o.ok and o.verdict == Verdict.SURVIVED]
    if raced:
        summary += (f"; {len(raced)} survived a race ranks time-slicing one GPU rarely open (not killed; each "
                    f"caught statically, below)")
    text.append(summary)
    for o in mismatched:
        text.append(f"MISMATCH {o.name} -O{o.optimize}: caught by {', '.join(o.caught_by)}, "
                    f"expected {' or '.join(o.expected)}" + (" (fails the matrix)" if o.strict else ""))
    for o in raced:
        text.append(f"RACE {o.name} -O{o.optimize}: SURVIVED, not a kill -- {o.race}")
    for o in outcomes:
        if not o.ok and o.detail:
            text.append(f"--- {o.name} -O{o.optimize}: {o.verdict} ---\n{o.detail}")
    return "\n".join(text)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mutants.meta", description=__doc__.splitlines()[0])
    config.add_to_parser(ap, "mutants.meta", helps={
        "impl": "mutant names to run (and/or 'unfused'); default: the whole catalogue",
        "world_sizes": "run every target at these W (default: each mutant's own)",
        "profile": "ci (derandomized) or nightly (random, every mutant at W = 2, 3, 4)",
        "report_dir": "also write the matrix there: kill-matrix.txt and kill-matrix.json",
        "jobs": "kill sessions running at once (auto: 2)",
        "case_deadline": f"seconds per case in kill sessions (default here {KILL_CASE_DEADLINE_S})"})
    ap.add_argument("--optimize", choices=("0", "1", "both"), default="both",
                    help="python optimize level of the suite (and its ranks); default both")
    ap.add_argument("--no-correct", action="store_true", help="skip the run on the correct implementation")
    ap.add_argument("--json", default=None, help="also write the outcomes as JSON to this path")
    ap.add_argument("--gpu", action="store_true",
                    help="the fault-injected builds of the fused kernel on shared-gpu (needs a Hopper GPU)")
    args = ap.parse_args(argv)
    cfg = config.install(args)
    if cfg.profile not in ("ci", "nightly"):
        ap.error(f"--profile must be ci or nightly, not {cfg.profile!r}")
    signal.signal(signal.SIGTERM, _interrupted)  # a stopped runner stops its kill sessions too
    levels = (0, 1) if args.optimize == "both" else (int(args.optimize),)
    jobs = 2 if cfg.jobs in (None, "auto") else int(cfg.jobs)
    tgts = targets(cfg.csv("impl"), cfg.profile, include_correct=not args.no_correct, gpu=args.gpu)
    if not tgts:  # "kill rate: 0/0" and exit 0 would read as a green matrix
        print("mutants.meta: nothing to run: no mutant and no control selected (--impl "
              f"{cfg.impl or '(all)'}{', --no-correct' if args.no_correct else ''}); an empty matrix is no pass",
              file=sys.stderr)
        return 2
    if cfg.world_sizes:
        sizes = tuple(int(w) for w in cfg.csv("world_sizes"))
        tgts = [dataclasses.replace(t, world_sizes=sizes) for t in tgts]
    t0 = time.perf_counter()

    def progress(o: Outcome) -> None:
        print(f"[{time.perf_counter() - t0:6.0f}s] {o.name} -O{o.optimize}: {o.verdict} "
              f"{o.test} {', '.join(o.caught_by)} ({o.seconds:.1f}s)", file=sys.stderr, flush=True)

    outcomes = run_matrix(tgts, levels, cfg.profile, jobs, progress)
    text = render(outcomes, time.perf_counter() - t0)
    print(text)
    paths = [args.json] if args.json else []
    if cfg.report_dir:
        os.makedirs(cfg.report_dir, exist_ok=True)
        with open(os.path.join(cfg.report_dir, "kill-matrix.txt"), "w") as f:
            f.write(text + "\n")
        paths.append(os.path.join(cfg.report_dir, "kill-matrix.json"))
    for path in paths:
        with open(path, "w") as f:
            json.dump([asdict(o) for o in outcomes], f, indent=1)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
