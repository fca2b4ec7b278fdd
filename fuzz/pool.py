"""A long-lived pool of W rank processes started with ``torchrun``, reused across cases: its lifecycle.

The driver (a pytest process, or ``fuzz.repro``) listens on a loopback port; each rank connects, says
hello and receives cases as JSON (:mod:`fuzz.channel`). :meth:`RankPool.run` sends one case to every
rank and collects every rank's result; :mod:`fuzz.verdict` turns them into a status, :mod:`fuzz.render`
into text. Ranks send their result as soon as their checks are done — before any cross-rank
collective — so a rank's exception reaches the driver even when it leaves its peers blocked.

Liveness (CONTRACT.md: nothing hangs):

* deadline passed   -> HANG: every rank's stacks (SIGUSR1: faulthandler dumps all threads) go into the
  report, the pool is killed;
* a rank dies       -> DIED: its socket closes or torchrun exits; reported with torchrun's account of the
  rank and its exit code and the log tails; the driver never waits on a dead rank;
* a rank raised     -> the others get :data:`fuzz.verdict.GRACE_S` to report (they may be blocked in a
  collective with it), then every rank's stacks are taken and the pool is killed;
* any case that is not PASSED or SKIPPED kills the pool, so the next case starts on a fresh one (a
  sticky CUDA error or a half-finished collective never leaks into the next example or the shrinking);
* ``close()`` / interpreter exit kill torchrun and the ranks; ranks also die with torchrun
  (PR_SET_PDEATHSIG) and with the driver (a watchdog thread polls its pid).

Signals reach only processes that are provably this pool's: each rank is pinned by a pidfd opened at
hello time (after checking that it descends from our torchrun), and a rank's process group is signalled
only while the pidfd of its leader says the leader is alive; torchrun's group only while its Popen
handle has not been reaped. A pid that died and was reused by someone else is never signalled.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

from . import verdict
from .case import Case, PoolSpec
from .channel import Channel, ChannelClosed
from .report import CaseReport
from .status import Status
from .topology import rank_env

DEFAULT_DEADLINE = float(os.environ.get("GEMM_RS_CASE_DEADLINE", "120"))
START_TIMEOUT = float(os.environ.get("GEMM_RS_POOL_START_TIMEOUT", "180"))
#: Seconds ranks get to write their stacks after SIGUSR1.
STACKS_WAIT_S = 2.0


class PoolError(RuntimeError):
    """The pool could not start, or broke outside a case."""


class RankProcess:
    """One rank's process, pinned by a pidfd opened at hello, and the process group it leads (or that its
    launcher leads, e.g. ``compute-sanitizer`` under sanitizer mode)."""

    def __init__(self, rank: int, pid: int, launcher_pid: int):
        self.rank, self.pid = rank, pid
        self._fds: list[int] = []
        try:
            self.fd = self._pin(pid, launcher_pid)
            self.pgid = os.getpgid(pid)
            if self.pgid == pid:
                self.leader_fd: int | None = self.fd
            elif self.pgid == launcher_pid:
                self.leader_fd = None  # torchrun's own group: signalled through its Popen handle
            else:
                self.leader_fd = self._pin(self.pgid, launcher_pid)
            if self.exited():
                raise ProcessLookupError(pid)
        except (OSError, PoolError) as exc:  # ProcessLookupError is an OSError
            self.close()
            raise PoolError(f"rank {rank} (pid {pid}) is gone or not a process of this pool: {exc}") from exc

    def _pin(self, pid: int, launcher_pid: int) -> int:
        fd = os.pidfd_open(pid)
        self._fds.append(fd)
        if not _descends_from(pid, launcher_pid):
            raise PoolError(f"pid {pid} does not descend from this pool's torchrun (pid {launcher_pid})")
        return fd

    def exited(self, timeout: float = 0.0) -> bool:
        return _fd_exited(self.fd, timeout)

    def signal(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self.fd, sig)
        except ProcessLookupError:
            pass

    def signal_group(self, sig: int) -> None:
        """``sig`` to the rank's process group while its leader is provably alive, and to the rank."""
        if self.leader_fd is not None:
            killpg_while_alive(self.leader_fd, self.pgid, sig)
        self.signal(sig)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


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
        self.procs: dict[int, RankProcess] = {}
        self.starts = 0
        self.start_seconds: list[float] = []
        self.cases_since_start = 0
        self.last_pids: dict[int, int] = {}
        self._ids = itertools.count()
        self._launcher_log = None
        atexit.register(self.close)

    # lifecycle ------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and len(self.chans) == self.spec.world_size

    def rank_pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self.procs.items()}

    def start(self) -> None:
        if self.alive:
            return
        self.kill()
        t0 = time.perf_counter()
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(self.spec.world_size)
        host, port = server.getsockname()
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for f in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, f))
        self._launcher_log = open(os.path.join(self.logdir, "torchrun.log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(self._command(), env=self._env(repo, f"{host}:{port}"),
                                     stdout=self._launcher_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=repo)
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
                self.procs[hello["rank"]] = RankProcess(hello["rank"], hello["pid"], self.proc.pid)
        except BaseException:
            for ch in pending:
                ch.close()
            self.kill()
            raise
        finally:
            server.close()
        self.starts += 1
        self.cases_since_start = 0
        self.start_seconds.append(time.perf_counter() - t0)

    def _env(self, repo: str, driver: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(rank_env(self.spec.topology, self.gpus))
        env.update(self.extra_env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        env.update(GEMM_RS_DRIVER=driver, GEMM_RS_DRIVER_PID=str(os.getpid()), GEMM_RS_LOGDIR=self.logdir,
                   GEMM_RS_IMPL=self.spec.impl, OMP_NUM_THREADS=env.get("GEMM_RS_RANK_THREADS", "1"),
                   PYTHONUNBUFFERED="1")
        if self.spec.optimize:
            env["PYTHONOPTIMIZE"] = str(self.spec.optimize)
        else:
            env.pop("PYTHONOPTIMIZE", None)
        return env

    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={self.spec.world_size}", "--max-restarts=0", "--monitor-interval=0.2"]
        if self.spec.sanitizer:
            # each rank: compute-sanitizer (its own log file per process) -> python -m fuzz.rank_worker
            return cmd + ["--no-python", "compute-sanitizer", f"--tool={self.spec.sanitizer}",
                          "--report-api-errors=no", "--print-limit=50",
                          f"--log-file={os.path.join(self.logdir, 'sanitizer-%p.log')}",
                          sys.executable, "-u", "-m", "fuzz.rank_worker"]
        return cmd + ["-m", "fuzz.rank_worker"]

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
        """SIGKILL to every rank (and the group it leads, while provably ours) and to torchrun's group
        (while unreaped); waits for all of them; reaps torchrun. Nothing in a pool is worth a graceful
        exit, except under a sanitizer: SIGTERM first, so it can write what it found."""
        for ch in self.chans.values():
            ch.close()
        self.chans = {}
        steps = ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)) if self.spec.sanitizer else ((signal.SIGKILL, 10.0),)
        for sig, wait_s in steps:
            for p in self.procs.values():
                p.signal_group(sig)
            if self.proc is not None and self.proc.returncode is None:
                try:
                    os.killpg(self.proc.pid, sig)  # our child, not yet reaped: its pid cannot be anyone else's
                except (ProcessLookupError, PermissionError):
                    pass
            if self._wait_gone(wait_s):
                break
        for p in self.procs.values():
            p.close()
        if self.procs:
            self.last_pids = self.rank_pids()  # for orphan checks after the pool is gone
        self.procs, self.hello, self.proc = {}, {}, None
        if self._launcher_log is not None:
            self._launcher_log.close()
            self._launcher_log = None

    def _wait_gone(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
        return all(p.exited(max(0.0, end - time.monotonic())) for p in self.procs.values())

    # cases ---------------------------------------------------------------------------------
    def run(self, case: Case, deadline: float | None = None, *, fresh: bool = False) -> CaseReport:
        """Run ``case`` on every rank and judge it. ``fresh``: on a pool that has run no case yet (a
        re-run that must not inherit anything)."""
        deadline = DEFAULT_DEADLINE if deadline is None else deadline
        if fresh and self.cases_since_start:
            self.kill()
        if not self.alive:
            self.start()
        self.cases_since_start += 1
        case_id = next(self._ids)
        t0 = time.perf_counter()
        stack_offsets = {r: _size(self._stack_file(r)) for r in self.procs}
        log_offsets = {r: _size(self._log_file(r)) for r in self.procs}
        results, liveness, note = self._exchange(case, case_id, deadline)
        status, why = verdict.judge(results, self.spec.world_size, liveness)
        report = CaseReport(case=case, spec=self.spec, status=status, ranks=results,
                            note="\n".join(p for p in (note, why) if p))
        report.seconds = time.perf_counter() - t0
        if not status.ok:
            if liveness is not None or set(results) != set(self.procs):
                report.stacks = self._collect_stacks(stack_offsets)  # where is everyone who did not answer
            report.logs = self._collect_logs(log_offsets)
            if liveness == Status.DIED:
                report.note += "\n" + self._exit_note()
            self.kill()
        return report

    def _exchange(self, case: Case, case_id: int, deadline: float) -> tuple[dict[int, dict], Status | None, str]:
        """Send the case, collect results: (rank -> result, HANG / DIED / None, what happened)."""
        results: dict[int, dict] = {}
        sel = selectors.DefaultSelector()
        try:
            for r, ch in self.chans.items():
                ch.send({"type": "case", "id": case_id, "case": case.to_json()})
                sel.register(ch.sock, selectors.EVENT_READ, r)
            waiting = set(self.chans)
            end = time.monotonic() + deadline
            grace: list = []  # [end of the grace period, the rank that raised] once one rank raised

            def take() -> None:
                for r in sorted(waiting):
                    msg = self._result(r, case_id)
                    if msg is not None:
                        results[r] = msg
                        waiting.discard(r)
                        if not grace and verdict.breaks_schedule(msg):
                            grace.extend((time.monotonic() + verdict.GRACE_S, r))

            while True:
                take()
                if not waiting:
                    return results, None, ""
                now = time.monotonic()
                if grace and now >= grace[0]:
                    return results, None, (
                        f"rank(s) {sorted(waiting)} gave no result within {verdict.GRACE_S:g}s after rank {grace[1]} "
                        f"raised (blocked in a collective with it?); stacks of every rank follow, the pool was killed")
                if now >= end:
                    return results, Status.HANG, (
                        f"no result from rank(s) {sorted(waiting)} within the {deadline:.0f}s case deadline; "
                        f"stacks of every rank follow, the pool was killed")
                closed = []
                for key, _ in sel.select(timeout=min(0.2, min(end, grace[0] if grace else end) - now)):
                    try:
                        self.chans[key.data].fill()
                    except ChannelClosed:
                        closed.append(key.data)
                        sel.unregister(key.fileobj)  # at EOF for good: never select it again
                take()  # a result sent just before its channel closed still counts
                dead = sorted(set(closed) & waiting)
                if dead:
                    return results, Status.DIED, f"rank(s) {dead} closed their channel mid-case (died)"
                if self.proc.poll() is not None and waiting:
                    return results, Status.DIED, f"torchrun exited mid-case; no result from rank(s) {sorted(waiting)}"
        except OSError as exc:
            return results, Status.DIED, f"channel error: {exc}"
        finally:
            sel.close()

    def _result(self, r: int, case_id: int) -> dict | None:
        """The result of case ``case_id`` from rank ``r`` if a whole line of it has arrived."""
        ch = self.chans[r]
        while ch.has_line():
            msg = ch.recv(timeout=1)
            if msg.get("type") == "result" and msg.get("id") == case_id:
                return msg
        return None

    # diagnostics ------------------------------------------------------------------------------
    def _stack_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.stacks")

    def _log_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.log")

    def _collect_stacks(self, offsets: dict[int, int]) -> dict[int, str]:
        asked = {r: p for r, p in self.procs.items() if not p.exited()}
        for p in asked.values():
            p.signal(signal.SIGUSR1)  # the rank itself only: SIGUSR1 would kill a sanitizer leading its group
        end = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < end and any(_size(self._stack_file(r)) <= offsets.get(r, 0) for r in asked):
            time.sleep(0.05)
        time.sleep(0.1)  # let faulthandler finish the last thread
        out = {}
        for r in self.procs:
            text = _read_from(self._stack_file(r), offsets.get(r, 0))
            out[r] = text if text.strip() else "(no stack: the rank did not answer SIGUSR1 — dead or stuck in C code)"
        return out

    def _collect_logs(self, offsets: dict[int, int], lines: int = 30) -> dict[int, str]:
        return {r: "\n".join(_read_from(self._log_file(r), offsets.get(r, 0)).splitlines()[-lines:])
                for r in self.procs}

    def _exit_note(self) -> str:
        """torchrun's account of the rank that died first (its rank and exit code) and its log tail."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "torchrun still running 10 s after a rank died"
        text = _read_from(os.path.join(self.logdir, "torchrun.log"), 0)
        tail = "\n".join(text.splitlines()[-15:])
        first = first_failure(text)
        head = f"rank {first[0]} died mid-case: exit code {first[1]}" if first else \
            "torchrun did not name the rank that failed first"
        return f"{head}\ntorchrun exit code {code}\n{tail}"

    def _tails(self) -> str:
        parts = []
        for name in sorted(os.listdir(self.logdir)):
            text = _read_from(os.path.join(self.logdir, name), 0)
            parts.append(f"--- {name} ---\n" + "\n".join(text.splitlines()[-20:]))
        return "\n".join(parts)


def first_failure(torchrun_log: str) -> tuple[int, int] | None:
    """(rank, exit code) of torchrun's "Root Cause (first observed failure)", if it printed one."""
    root = torchrun_log.split("Root Cause", 1)
    if len(root) < 2:
        return None
    rank = re.search(r"rank\s*:\s*(\d+)", root[1])
    code = re.search(r"exitcode\s*:\s*(-?\d+)", root[1])
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def killpg_while_alive(leader_fd: int, pgid: int, sig: int) -> bool:
    """``sig`` to process group ``pgid`` only while its leader, pinned by the pidfd ``leader_fd`` (opened
    while the leader was provably ours), has not exited: the group id is then still that group's, never a
    reused pid's. False when the leader is gone (nothing signalled)."""
    if _fd_exited(leader_fd):
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _descends_from(pid: int, ancestor: int, max_depth: int = 8) -> bool:
    for _ in range(max_depth):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if ppid == ancestor:
            return True
        if ppid <= 1:
            return False
        pid = ppid
    return False


def _fd_exited(fd: int, timeout: float = 0.0) -> bool:
    """A pidfd is readable once its process has exited."""
    return bool(select.select([fd], [], [], timeout)[0])


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
