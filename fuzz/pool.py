"""A long-lived pool of W rank processes started with ``torchrun``, reused across cases.

The driver (a pytest process, or ``fuzz.repro``) listens on a loopback port; each rank connects and
receives cases as JSON (:mod:`fuzz.channel`). :meth:`RankPool.run` sends one case to every rank and
waits for every rank's result until the case deadline. Liveness (CONTRACT.md: nothing hangs):

* deadline passed  -> every rank gets SIGUSR1 (faulthandler dumps all threads' stacks), the stacks go
  into the report, the whole pool is killed (SIGTERM, then SIGKILL) and restarted for the next case;
* a rank dies      -> its socket closes or torchrun exits: reported with the rank's log tail, the pool
  is killed and restarted; the driver never waits on a dead rank;
* ``close()`` / interpreter exit kill torchrun and every rank's process group; ranks also die with
  torchrun (PR_SET_PDEATHSIG) and with the driver (a watchdog thread polls its pid), so no orphan
  outlives a driver that was itself killed.
"""

from __future__ import annotations

import atexit
import itertools
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .case import Case, PoolSpec, repro_command
from .channel import Channel, ChannelClosed
from .topology import rank_env

DEFAULT_DEADLINE = float(os.environ.get("GEMM_RS_CASE_DEADLINE", "120"))
START_TIMEOUT = float(os.environ.get("GEMM_RS_POOL_START_TIMEOUT", "180"))


class PoolError(RuntimeError):
    """The pool could not start, or broke outside a case."""


@dataclass
class CaseReport:
    """What the ranks said about one case, plus what reruns it."""

    case: Case
    spec: PoolSpec
    status: str                       # passed | failed | hang | died | error
    ranks: dict[int, dict] = field(default_factory=dict)   # rank -> result message
    stacks: dict[int, str] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def checks(self):
        for rank, msg in sorted(self.ranks.items()):
            for c in msg.get("checks", []):
                yield rank, c

    def failed_checks(self) -> list[dict]:
        return [c for _, c in self.checks() if not c["passed"] and not c["skipped"]]

    def skipped_checks(self) -> list[dict]:
        return [c for _, c in self.checks() if c["skipped"]]

    def property_names(self) -> set[str]:
        return {c["name"] for _, c in self.checks()}

    def repro(self) -> str:
        return repro_command(self.case, self.spec)

    def render(self, max_failures: int = 6) -> str:
        from properties.result import CheckResult

        lines = [f"GEMM-RS fuzz case {self.status.upper()}: {self.case.short()} "
                 f"[impl={self.spec.impl} topology={self.spec.topology} W={self.spec.world_size} "
                 f"optimize={self.spec.optimize}] in {self.seconds:.2f}s"]
        if self.note:
            lines.append(self.note)
        for i, c in enumerate(self.failed_checks()):
            if i == max_failures:
                lines.append(f"... and {len(self.failed_checks()) - max_failures} more failed checks")
                break
            lines.append(CheckResult(**{**c, "worst_index": tuple(c["worst_index"]) if c["worst_index"] else None})
                         .render())
        for rank, msg in sorted(self.ranks.items()):
            if msg.get("error"):
                lines.append(f"rank {rank} raised:\n{msg['error'].rstrip()}")
        for rank, text in sorted(self.stacks.items()):
            lines.append(f"--- rank {rank} stacks ---\n{text.rstrip()}")
        for rank, text in sorted(self.logs.items()):
            if text.strip():
                lines.append(f"--- rank {rank} log (tail) ---\n{text.rstrip()}")
        lines.append(f"REPRO: {self.repro()}")
        return "\n".join(lines)


class FuzzFailure(AssertionError):
    """A case failed; the message holds every failed check, stacks if it hung, and the REPRO line."""

    def __init__(self, report: CaseReport):
        super().__init__(report.render())
        self.report = report


class RankPool:
    def __init__(self, spec: PoolSpec, *, gpus: list[int] | None = None, logdir: str | None = None,
                 extra_env: dict[str, str] | None = None):
        self.spec = spec
        self.gpus = gpus
        self.extra_env = dict(extra_env or {})
        self.logdir = logdir or tempfile.mkdtemp(prefix=f"gemm-rs-pool-W{spec.world_size}-")
        self.proc: subprocess.Popen | None = None
        self.chans: dict[int, Channel] = {}
        self.hello: dict[int, dict] = {}
        self.starts = 0
        self.start_seconds: list[float] = []
        self._ids = itertools.count()
        self.last_pids: dict[int, int] = {}
        atexit.register(self.close)

    # lifecycle ------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and len(self.chans) == self.spec.world_size

    def rank_pids(self) -> dict[int, int]:
        return {r: h["pid"] for r, h in self.hello.items()}

    def start(self) -> None:
        if self.alive:
            return
        self.close()
        t0 = time.perf_counter()
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(self.spec.world_size)
        host, port = server.getsockname()
        env = dict(os.environ)
        env.update(rank_env(self.spec.topology, self.gpus))
        env.update(self.extra_env)
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        env.update(GEMM_RS_DRIVER=f"{host}:{port}", GEMM_RS_DRIVER_PID=str(os.getpid()),
                   GEMM_RS_LOGDIR=self.logdir, GEMM_RS_IMPL=self.spec.impl,
                   OMP_NUM_THREADS=env.get("GEMM_RS_RANK_THREADS", "1"), PYTHONUNBUFFERED="1")
        if self.spec.optimize:
            env["PYTHONOPTIMIZE"] = str(self.spec.optimize)
        else:
            env.pop("PYTHONOPTIMIZE", None)
        for f in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, f))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={self.spec.world_size}", "--max-restarts=0", "--monitor-interval=0.2"]
        if self.spec.sanitizer:
            # each rank: compute-sanitizer (its own log file per process) -> python -m fuzz.rank_worker
            cmd += ["--no-python", "compute-sanitizer", f"--tool={self.spec.sanitizer}", "--report-api-errors=no",
                    "--print-limit=50", f"--log-file={os.path.join(self.logdir, 'sanitizer-%p.log')}",
                    sys.executable, "-u", "-m", "fuzz.rank_worker"]
        else:
            cmd += ["-m", "fuzz.rank_worker"]
        self._launcher_log = open(os.path.join(self.logdir, "torchrun.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._launcher_log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=repo)
        server.settimeout(1.0)
        deadline = time.monotonic() + START_TIMEOUT
        pending: list[Channel] = []
        try:
            while len(pending) < self.spec.world_size:
                if time.monotonic() > deadline:
                    raise PoolError(f"pool did not start within {START_TIMEOUT:.0f}s\n{self._tails()}")
                if self.proc.poll() is not None:
                    raise PoolError(f"torchrun exited with {self.proc.returncode} while starting\n{self._tails()}")
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                pending.append(Channel(conn))
            for ch in pending:
                hello = ch.recv(timeout=max(1.0, deadline - time.monotonic()))
                self.chans[hello["rank"]] = ch
                self.hello[hello["rank"]] = hello
        except BaseException:
            for ch in pending:
                ch.close()
            self.kill()
            raise
        finally:
            server.close()
        self.starts += 1
        self.start_seconds.append(time.perf_counter() - t0)

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self, grace_s: float = 10.0) -> None:
        """Stop politely (ranks exit their loop, ``grace_s`` to do it), then make sure nothing is left."""
        if self.proc is not None and self.proc.poll() is None:
            for ch in self.chans.values():
                try:
                    ch.send({"type": "stop"})
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGTERM then SIGKILL to torchrun's and every rank's process group; reap torchrun."""
        for ch in self.chans.values():
            ch.close()
        self.chans = {}
        groups = [_pgid(pid) for pid in self.rank_pids().values()]  # a rank under a sanitizer is in its group
        if self.proc is not None:
            groups.append(self.proc.pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pgid in groups:
                try:
                    os.killpg(pgid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=3 if sig == signal.SIGTERM else 10)
                    if sig == signal.SIGTERM:
                        continue
                except subprocess.TimeoutExpired:
                    continue
        self.proc = None
        if self.hello:
            self.last_pids = self.rank_pids()  # for orphan checks after the pool is gone
        self.hello = {}

    # cases ---------------------------------------------------------------------------------
    def run(self, case: Case, deadline: float | None = None) -> CaseReport:
        deadline = DEFAULT_DEADLINE if deadline is None else deadline
        if not self.alive:
            self.start()
        case_id = next(self._ids)
        t0 = time.perf_counter()
        report = CaseReport(case=case, spec=self.spec, status="passed")
        stack_offsets = {r: _size(self._stack_file(r)) for r in self.chans}
        log_offsets = {r: _size(self._log_file(r)) for r in self.chans}
        sel = selectors.DefaultSelector()
        try:
            for r, ch in self.chans.items():
                ch.send({"type": "case", "id": case_id, "case": case.to_json()})
                sel.register(ch.sock, selectors.EVENT_READ, r)
            waiting = set(self.chans)
            end = time.monotonic() + deadline
            while waiting:
                for r in [r for r in waiting if self.chans[r].has_line()]:
                    self._take(report, r, case_id, waiting)
                if not waiting:
                    break
                left = end - time.monotonic()
                if left <= 0:
                    report.status = "hang"
                    report.note = (f"no result from rank(s) {sorted(waiting)} within the {deadline:.0f}s case "
                                   f"deadline; stacks of every rank follow, the pool was killed and restarts")
                    report.stacks = self._collect_stacks(stack_offsets)
                    break
                for key, _ in sel.select(timeout=min(0.2, left)):
                    r = key.data
                    try:
                        self.chans[r].fill()
                    except ChannelClosed:
                        waiting.discard(r)
                        report.status = "died"
                        report.note = f"rank {r} closed its channel mid-case (died)"
                if report.status == "died":
                    break
                if self.proc.poll() is not None and not any(self.chans[r].has_line() for r in waiting):
                    report.status = "died"
                    report.note = "torchrun exited mid-case"
                    break
        except OSError as exc:
            report.status = "died"
            report.note = f"channel error: {exc}"
        finally:
            sel.close()
        report.seconds = time.perf_counter() - t0
        if report.status in ("hang", "died"):
            report.logs = self._collect_logs(log_offsets)
            if report.status == "died":
                report.stacks = self._collect_stacks(stack_offsets)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                report.note += "\n" + self._exit_note()
            self.kill()
            return report
        self._verdict(report)
        return report

    def _take(self, report: CaseReport, r: int, case_id: int, waiting: set) -> None:
        msg = self.chans[r].recv(timeout=1)
        if msg.get("type") == "result" and msg.get("id") == case_id:
            report.ranks[r] = msg
            waiting.discard(r)

    def _verdict(self, report: CaseReport) -> None:
        errors = any(m.get("error") for m in report.ranks.values())
        failed = bool(report.failed_checks())
        agreed = {m.get("group_failed") for m in report.ranks.values()}
        if errors:
            report.status = "error"
        elif failed:
            report.status = "failed"
        if len(agreed) > 1 or (agreed and agreed.pop() != (errors or failed)):
            report.status = "error" if report.status == "passed" else report.status
            report.note += " ranks disagree on the group verdict (control all-reduce)"
        checks = list(report.checks())
        if report.status == "passed" and checks and all(c["skipped"] for _, c in checks):
            report.status = "skipped"
            report.note += " every check was skipped: " + "; ".join(sorted({c["detail"] for _, c in checks}))
        if not report.ranks or all(not m.get("checks") for m in report.ranks.values()) and not errors:
            report.status = "error"
            report.note += " no rank ran any check"

    # diagnostics ------------------------------------------------------------------------------
    def _stack_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.stacks")

    def _log_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.log")

    def _collect_stacks(self, offsets: dict[int, int], signal_ranks: bool = True) -> dict[int, str]:
        if signal_ranks:
            for pid in self.rank_pids().values():
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            time.sleep(1.0)
        out = {}
        for r in self.hello:
            text = _read_from(self._stack_file(r), offsets.get(r, 0))
            out[r] = text if text.strip() else "(no stack: the rank did not answer SIGUSR1 — dead or stuck in C code)"
        return out

    def _collect_logs(self, offsets: dict[int, int], lines: int = 30) -> dict[int, str]:
        return {r: "\n".join(_read_from(self._log_file(r), offsets.get(r, 0)).splitlines()[-lines:])
                for r in self.hello}

    def _exit_note(self) -> str:
        code = self.proc.poll() if self.proc else None
        tail = "\n".join(_read_from(os.path.join(self.logdir, "torchrun.log"), 0).splitlines()[-15:])
        return f"torchrun exit code {code}\n{tail}" if code is not None else "torchrun still running"

    def _tails(self) -> str:
        parts = []
        for name in sorted(os.listdir(self.logdir)):
            text = _read_from(os.path.join(self.logdir, name), 0)
            parts.append(f"--- {name} ---\n" + "\n".join(text.splitlines()[-20:]))
        return "\n".join(parts)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return pid


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return ""
