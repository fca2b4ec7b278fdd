"""The release campaign behind ``ci/gate``: run the fuzz gate for this host, then summarise.

    python -m fuzz.campaign [--profile smoke|ci|nightly] [--impl ...] [--world-sizes ...] [--topology ...]
                            [--out reports/<stamp>]

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

from .pool import killpg_while_alive
from .status import Status

PROFILES = {
    # profile: (HYPOTHESIS_PROFILE, examples override or None)
    "smoke": ("ci", "4"),
    "ci": ("ci", None),
    "nightly": ("nightly", None),
}


def default_pools_per_gpu(cpus: int | None = None) -> int:
    """Pools per GPU when nobody says: shared-gpu cases are host-bound (a pool is W processes plus a
    driver), so a quarter of the cores, between 1 and 4."""
    return max(1, min(4, (cpus or os.cpu_count() or 1) // 4))


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


def expected_cases(cmd: list[str], env: dict, root: str) -> int | None:
    """Cases the run will make, from the collected test ids and the examples per test (an estimate:
    a failing test stops early, shrinking adds cases)."""
    from .settings import WEIGHTS, examples_for

    collect = [a for a in cmd if not a.startswith("--junitxml") and a != "-q"]
    if "-n" in collect:
        i = collect.index("-n")
        del collect[i : i + 2]
    proc = subprocess.run(collect + ["--collect-only", "-q"], env=env, cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 5):
        return None
    profile, override = env.get("HYPOTHESIS_PROFILE", "ci"), env.get("GEMM_RS_EXAMPLES")
    total = 0
    for line in proc.stdout.splitlines():
        name = line.split("::")[-1].split("[")[0] if "::" in line else ""
        if name in WEIGHTS:
            total += examples_for(name, profile, override)
    return total or None


def _progress(out_dir: str, stop: threading.Event, t0: float, every: float, expected: int | None) -> None:
    last = -1
    while not stop.wait(every):
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ci/gate", description="GEMM-RS release campaign for this host")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    ap.add_argument("--impl", default=None, help="comma list; default: all the host can run")
    ap.add_argument("--world-sizes", default=None)
    ap.add_argument("--topology", default=None)
    ap.add_argument("--out", default=None, help="report directory (default reports/<UTC stamp>)")
    ap.add_argument("--jobs", default=os.environ.get("GEMM_RS_JOBS", "auto"))
    ap.add_argument("--progress-every", type=float, default=15.0)
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds; then pytest is interrupted, the report is still written and the verdict is FAIL")
    ap.add_argument("--pools-per-gpu", type=int, default=None,
                    help="shared-gpu rank pools time-slicing one GPU at once (default: GEMM_RS_POOLS_PER_GPU, "
                         "else a quarter of the CPU cores, 1 to 4)")
    args, extra = ap.parse_known_args(argv)

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.abspath(args.out or os.path.join(root, "reports", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    os.makedirs(out_dir, exist_ok=True)
    hyp_profile, examples = PROFILES[args.profile]
    env = dict(os.environ, PYTHONOPTIMIZE="1", HYPOTHESIS_PROFILE=hyp_profile, GEMM_RS_REPORT_DIR=out_dir)
    if examples:
        env["GEMM_RS_EXAMPLES"] = examples
    env["GEMM_RS_POOLS_PER_GPU"] = str(args.pools_per_gpu or env.get("GEMM_RS_POOLS_PER_GPU")
                                       or default_pools_per_gpu())
    cmd = [sys.executable, "-m", "pytest", os.path.join(root, "fuzz"), "-q", "-n", str(args.jobs),
           "-p", "no:cacheprovider", "-rs", f"--junitxml={os.path.join(out_dir, 'junit.xml')}"]
    for opt, val in (("--impl", args.impl), ("--world-sizes", args.world_sizes), ("--topology", args.topology)):
        if val:
            cmd += [opt, val]
    cmd += extra
    print(f"[gate] profile {args.profile}; report in {out_dir}; {env['GEMM_RS_POOLS_PER_GPU']} pool(s) per GPU\n"
          f"[gate] {' '.join(cmd)}", flush=True)
    expected = expected_cases(cmd, env, root)
    t0 = time.time()
    stop = threading.Event()
    ticker = threading.Thread(target=_progress, args=(out_dir, stop, t0, args.progress_every, expected), daemon=True)
    ticker.start()
    timed_out = threading.Event()
    with open(os.path.join(out_dir, "pytest.log"), "w") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        leader = os.pidfd_open(proc.pid)  # not reaped yet: pins pytest, the leader of its session
        limit = None
        if args.time_limit:
            limit = threading.Timer(args.time_limit, _interrupt, args=(proc, leader, timed_out))
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
    stop.set()
    if timed_out.is_set():
        print(f"[gate] time limit of {args.time_limit:.0f}s reached: pytest was interrupted; the report covers the "
              f"cases run so far and the verdict is FAIL", flush=True)
    from .summary import summarise

    summary = summarise(out_dir, pytest_rc=rc, seconds=time.time() - t0, profile=args.profile,
                        interrupted=f"time limit of {args.time_limit:.0f}s reached" if timed_out.is_set() else None)
    print(summary["markdown"])
    return 0 if summary["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
