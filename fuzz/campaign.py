"""The release campaign behind ``ci/gate``: run the fuzz gate for this host, then summarise.

    python -m fuzz.campaign [--profile smoke|ci|nightly] [--impl ...] [--world-sizes ...] [--topology ...]
                            [--report-dir reports/<stamp>] [--nnodes N --control-address HOST:PORT] ...

(every flag: ``--help``, fuzz/config.py). With the ``ci`` or ``smoke`` profile (derandomized: no example
database of its own) and examples stored in the database (``--hypothesis-db``), a replay pass of those
runs first (``HYPOTHESIS_PROFILE=replay``, its cases in the same report): a failure last night's run found
is the first thing tried.

It runs ``PYTHONOPTIMIZE=1 pytest -n auto fuzz/`` (how users run the gate) with every case recorded as a
JSON line (fuzz/record.py), shows progress while it runs (cases done, failures so far, rate), then
writes the summary (:mod:`fuzz.summary`) and prints a verdict. Exit status 0 only when pytest passed and
every recorded case passed; skipped tests and skipped checks are listed with their reasons, never
counted as passed.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import threading
import time

from . import config
from .node import killpg_while_alive
from .record import COLLECTED
from .settings import GATE_PROFILES as PROFILES
from .settings import stored_examples
from .status import Status
from .topology import default_pools_per_gpu


def _interrupt(proc: subprocess.Popen, leader: int, flag: threading.Event, grace_s: float = 30.0) -> None:
    """Time limit: SIGINT to pytest's whole session (it stops and writes its JUnit XML), SIGKILL after a
    grace period; only while pytest (the session leader, pinned by the pidfd ``leader``) is alive. Rank
    pools watch their driver and die with it."""
    import signal

    flag.set()
    for sig in (signal.SIGINT, signal.SIGKILL):
        if not killpg_while_alive(leader, proc.pid, sig):
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


#: A case record's status: its first "status" key (the case itself has none; fuzz/record.py writes it first).
_STATUS = re.compile(r'"status": "([a-z]+)"')


def _count_cases(out_dir: str) -> tuple[int, int]:
    done = failed = 0
    for path in glob.glob(os.path.join(out_dir, "cases-*.jsonl")):
        with open(path) as f:
            for line in f:
                m = _STATUS.search(line)
                if m is None or not line.endswith("\n"):
                    continue  # a line still being written
                done += 1
                failed += not Status(m.group(1)).ok
    return done, failed


def expected_cases(out_dir: str, env: dict) -> int | None:
    """Cases the run will make, from the test ids its pytest session collected (:data:`fuzz.record.COLLECTED`, None
    until it has) and the examples per test (an estimate: a failing test stops early, shrinking adds cases)."""
    from .settings import WEIGHTS, examples_for

    try:
        with open(os.path.join(out_dir, COLLECTED)) as f:
            ids = f.read().splitlines()
    except OSError:
        return None
    profile, override = env.get("HYPOTHESIS_PROFILE", "ci"), env.get(config.BY_NAME["examples"].env)
    total = 0
    for test_id in ids:
        name = test_id.split("::")[-1].split("[")[0]
        if name in WEIGHTS:
            total += examples_for(name, profile, override)
    return total or None


def _progress(out_dir: str, stop: threading.Event, t0: float, every: float, expect) -> None:
    """Prints the progress line every ``every`` s until ``stop``; ``expect()``: the estimate of
    :func:`expected_cases`, asked again until the session has collected its tests."""
    expected = None
    last = -1
    while not stop.wait(every):
        if expected is None:
            try:
                expected = expect()
            except Exception:  # noqa: BLE001 -- an estimate for the progress line only
                expected = None
        done, failed = _count_cases(out_dir)
        if done == last:
            continue
        elapsed = time.time() - t0
        rate = done / max(1e-9, elapsed / 60)
        left = ""
        if expected and done:
            remaining = max(0, expected - done)
            left = f", ~{remaining} cases / ~{remaining / max(rate, 1e-9) * 60:.0f}s left (of ~{expected})"
        print(f"[gate] {done} cases, {failed} failed, {rate:.0f} cases/min, {elapsed:.0f}s elapsed{left}", flush=True)
        last = done


def run_pytest(cmd: list[str], env: dict, root: str, log_path: str, time_limit: float | None) -> tuple[int, bool]:
    """One pytest session, its output in ``log_path`` (failures and REPRO lines echoed); (exit code, whether
    ``time_limit`` interrupted it)."""
    timed_out = threading.Event()
    with open(log_path, "a") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        leader = os.pidfd_open(proc.pid)  # not reaped yet: pins pytest, the leader of its session
        limit = None
        if time_limit is not None:
            limit = threading.Timer(max(0.0, time_limit), _interrupt, args=(proc, leader, timed_out))
            limit.daemon = True
            limit.start()
        for line in proc.stdout:
            log.write(line)
            if line.startswith(("FAILED", "ERROR", "SKIPPED", "=")) or "REPRO:" in line:
                print(line, end="", flush=True)
        rc = proc.wait()
        if limit is not None:
            limit.cancel()
            limit.join()
        os.close(leader)
    return rc, timed_out.is_set()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ci/gate", description="GEMM-RS release campaign for this host")
    config.add_to_parser(ap, "ci/gate", helps={"report_dir": "report directory (default reports/<UTC stamp>)"})
    ap.add_argument("--progress-every", type=float, default=15.0)
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds; then pytest is interrupted, the report is still written and the verdict is FAIL")
    args, extra = ap.parse_known_args(argv)
    cfg = config.install(args)
    if cfg.profile not in PROFILES:
        ap.error(f"--profile must be one of {sorted(PROFILES)}, not {cfg.profile!r}")
    nnodes = cfg.integer("nnodes") or 1

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.abspath(cfg.report_dir or os.path.join(root, "reports",
                                                             time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    os.makedirs(out_dir, exist_ok=True)
    hyp_profile, examples = PROFILES[cfg.profile]
    env = dict(os.environ, PYTHONOPTIMIZE="1", HYPOTHESIS_PROFILE=hyp_profile, GEMM_RS_REPORT_DIR=out_dir)
    if examples and not cfg.examples:
        env["GEMM_RS_EXAMPLES"] = examples
    env["GEMM_RS_POOLS_PER_GPU"] = str(cfg.pools_per_gpu or default_pools_per_gpu())
    jobs = "0" if nnodes > 1 else cfg.jobs  # a pool across nodes listens on one control port: one driver
    cmd = [sys.executable, "-m", "pytest", os.path.join(root, "fuzz"), "-q", "-n", str(jobs),
           "-p", "no:cacheprovider", "-rs"]
    cmd += extra
    print(f"[gate] profile {cfg.profile}; report in {out_dir}; {env['GEMM_RS_POOLS_PER_GPU']} pool(s) per GPU"
          + (f"; {nnodes} nodes (node agents dial {cfg.control_address})" if nnodes > 1 else "")
          + f"\n[gate] {' '.join(cmd)}", flush=True)
    t0 = time.time()
    rc = 0
    interrupted = False
    stored = stored_examples()
    if hyp_profile == "ci" and stored:  # a failure a nightly run stored is the first thing tried
        print(f"[gate] replaying {stored} stored example(s) from the example database first", flush=True)
        rc, interrupted = run_pytest(cmd + [f"--junitxml={os.path.join(out_dir, 'junit-replay.xml')}"],
                                     dict(env, HYPOTHESIS_PROFILE="replay"), root,
                                     os.path.join(out_dir, "pytest.log"), args.time_limit)
    main_cmd = cmd + [f"--junitxml={os.path.join(out_dir, 'junit.xml')}"]
    if os.path.exists(os.path.join(out_dir, COLLECTED)):  # the replay's: the estimate is the main session's
        os.remove(os.path.join(out_dir, COLLECTED))
    stop = threading.Event()
    estimate = lambda: expected_cases(out_dir, env)  # noqa: E731
    ticker = threading.Thread(target=_progress, args=(out_dir, stop, t0, args.progress_every, estimate), daemon=True)
    ticker.start()
    if not interrupted:
        left = None if args.time_limit is None else args.time_limit - (time.time() - t0)
        main_rc, interrupted = run_pytest(main_cmd, env, root, os.path.join(out_dir, "pytest.log"), left)
        rc = rc or main_rc
    stop.set()
    if interrupted:
        print(f"[gate] time limit of {args.time_limit:.0f}s reached: pytest was interrupted; the report covers the "
              f"cases run so far and the verdict is FAIL", flush=True)
    from .summary import summarise

    summary = summarise(out_dir, pytest_rc=rc, seconds=time.time() - t0, profile=cfg.profile,
                        interrupted=f"time limit of {args.time_limit:.0f}s reached" if interrupted else None)
    print(summary["markdown"])
    return 0 if summary["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
