"""One host's part of a rank pool: the ``torchrun`` agent started there, the ranks it started (pinned by
pidfds), their log and stack files. The driver's host has a :class:`LocalNode` in the pool itself; every
other host runs one inside :mod:`fuzz.node_agent`, which acts for the driver there (a driver cannot signal
or read another host's processes).

Signals reach only processes that are provably this node's: each rank is pinned by a pidfd opened when the
driver tells us its pid (after checking that it descends from our torchrun), and a rank's process group is
signalled only while the pidfd of its leader says the leader is alive; torchrun's group only while its
Popen handle has not been reaped. A pid that died and was reused by someone else is never signalled.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

from . import native_stacks, warm_agent
from .config import STACK_SIGNAL

#: Seconds ranks get to write their stacks after the stack signal (fuzz.config.STACK_SIGNAL).
STACKS_WAIT_S = 2.0
#: Seconds the node waits for its torchrun to exit after a rank died, to read its account of the death.
EXIT_NOTE_WAIT_S = 10.0
#: A frame line of a C++ backtrace (c10's "frame #12: python3() [0x61c5d1]").
_CPP_FRAME = re.compile(r"^frame #\d+: ")


class PoolError(RuntimeError):
    """The pool could not start, or broke outside a case."""


class RankProcess:
    """One rank's process, pinned by a pidfd, and the process group it leads (or that its launcher leads,
    e.g. ``compute-sanitizer`` under sanitizer mode)."""

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


class LocalNode:
    """torchrun and its ranks on this host, for one pool (``index``: the node's number in the pool, 0 on the
    driver's host). Files in ``logdir``: torchrun.log, rank<r>.log, rank<r>.stacks."""

    def __init__(self, index: int, logdir: str, *, sanitizer: bool = False, native_stacks: bool = False,
                 warm: bool = False):
        self.index, self.logdir, self.sanitizer = index, logdir, sanitizer
        self.warm = warm  # torchrun agents from fuzz.warm_agent's spares where one matches
        self.native_stacks = native_stacks  # also dump native stacks (fuzz.native_stacks) of the asked ranks
        self.proc: subprocess.Popen | None = None
        self.procs: dict[int, RankProcess] = {}
        self.last_pids: dict[int, int] = {}
        self._log = None
        self._stack_offsets: dict[int, int] = {}
        self._log_offsets: dict[int, int] = {}

    def launch(self, cmd: list[str], env: dict[str, str], cwd: str) -> None:
        for f in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, f))
        self._log = open(os.path.join(self.logdir, "torchrun.log"), "w")  # noqa: SIM115
        self.proc = warm_agent.launch(cmd, env, cwd, self._log) if self.warm else None
        if self.proc is None:
            self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        if self.warm and cmd[:3] == [sys.executable, "-m", warm_agent.TORCHRUN_MODULE]:
            warm_agent.spawn(env, cwd)  # the next pool's agent (fuzz/warm_agent.py)

    def exited(self) -> bool:
        """torchrun is not running (never started, or exited)."""
        return self.proc is None or self.proc.poll() is not None

    def pin(self, pids: dict[int, int]) -> None:
        if self.proc is None:
            raise PoolError(f"node {self.index}: no torchrun to pin ranks {sorted(pids)} under")
        for r, pid in pids.items():
            self.procs[r] = RankProcess(r, pid, self.proc.pid)

    def rank_pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self.procs.items()}

    # diagnostics ------------------------------------------------------------------------------
    def mark(self) -> None:
        """A case starts: its stacks and logs are what the files get from now on."""
        self._stack_offsets = {r: _size(self._stack_file(r)) for r in self.procs}
        self._log_offsets = {r: _size(self._log_file(r)) for r in self.procs}

    def ask_stacks(self) -> list[int]:
        """The stack signal to the living ranks (the rank itself only: it would kill a sanitizer leading its group)."""
        asked = [r for r, p in self.procs.items() if not p.exited()]
        for r in asked:
            self.procs[r].signal(STACK_SIGNAL)
        return asked

    def read_stacks(self, asked: list[int]) -> dict[int, str]:
        end = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < end and any(_size(self._stack_file(r)) <= self._stack_offsets.get(r, 0)
                                             for r in asked):
            time.sleep(0.05)
        time.sleep(0.1)  # let faulthandler finish the last thread
        out = {}
        for r in self.procs:
            text = _read_from(self._stack_file(r), self._stack_offsets.get(r, 0))
            out[r] = text if text.strip() else ("(no stack: the rank did not answer the stack signal — dead, or its "
                                                "handler was replaced)")
        if self.native_stacks:
            living = {r: self.procs[r].pid for r in asked if not self.procs[r].exited()}
            for r, text in native_stacks.dump(living).items():
                out[r] = f"{out[r].rstrip()}\n--- native stacks of rank {r} (pid {living[r]}) ---\n{text}"
        return out

    def logs(self, lines: int = 30) -> dict[int, str]:
        """Each rank's last ``lines`` lines of this case, without the frames of a C++ backtrace (``frame #12:
        python3() [0x61c5d1]``: 40 of them would push out the ``what():`` that says why a rank aborted)."""
        return {r: "\n".join([ln for ln in _read_from(self._log_file(r), self._log_offsets.get(r, 0)).splitlines()
                              if not _CPP_FRAME.match(ln)][-lines:])
                for r in self.procs}

    def exit_note(self) -> str:
        """torchrun's account of the rank that died first (its rank and exit code) and its log tail."""
        if self.proc is None:
            return f"node {self.index}: no torchrun"
        try:
            code = self.proc.wait(timeout=EXIT_NOTE_WAIT_S)
        except subprocess.TimeoutExpired:
            return f"torchrun (node {self.index}) still running {EXIT_NOTE_WAIT_S:.0f} s after a rank died"
        text = _read_from(os.path.join(self.logdir, "torchrun.log"), 0)
        tail = "\n".join(text.splitlines()[-15:])
        failed = failures(text)
        head = "\n".join(f"rank {r} died mid-case: exit code {c}" for r, c in failed) if failed else \
            "torchrun did not name the rank that failed first"
        where = f" (node {self.index})" if self.index else ""
        return f"{head}\ntorchrun{where} exit code {code}\n{tail}"

    def tails(self) -> str:
        parts = []
        for name in sorted(os.listdir(self.logdir)):
            text = _read_from(os.path.join(self.logdir, name), 0)
            parts.append(f"--- node {self.index}: {name} ---\n" + "\n".join(text.splitlines()[-20:]))
        return "\n".join(parts)

    def _stack_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.stacks")

    def _log_file(self, r: int) -> str:
        return os.path.join(self.logdir, f"rank{r}.log")

    # the end -----------------------------------------------------------------------------------
    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for torchrun to exit by itself; True if it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        """SIGKILL to every rank (and the group it leads, while provably ours) and to torchrun's group
        (while unreaped); waits for all of them; reaps torchrun. Under a sanitizer SIGTERM first, so it can
        write what it found."""
        steps = ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)) if self.sanitizer else ((signal.SIGKILL, 10.0),)
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
        self.procs, self.proc = {}, None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _wait_gone(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        if not self.wait(timeout):
            return False
        return all(p.exited(max(0.0, end - time.monotonic())) for p in self.procs.values())


def torchrun_command(*, sanitizer: str | None, logdir: str, nproc: int, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, run_id: str | None = None, hosts_rdzv: bool = True) -> list[str]:
    """One node's torchrun: ``--standalone`` on one node; across nodes the c10d rendezvous at
    ``rdzv_endpoint``, whose store the driver's node hosts (``hosts_rdzv``).

    The agent forks its ranks (torchrun's ``--start-method=fork --run-path``: each rank runs ``fuzz/rank_main.py``
    in a fork of the agent, which has imported torch already): a rank costs no interpreter start and no second
    ``import torch`` (on the 2-core CI machine a CPU pool of W = 2 started in 3.4 s instead of 6.0 s, W = 8 in
    4.0 s instead of 17 s). The agent never touches CUDA, so a forked rank initialises its own. Under a sanitizer
    each rank is a new process, ``compute-sanitizer`` wrapping its interpreter."""
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1:
        cmd += ["--standalone"]
    else:
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={run_id}", f"--rdzv-conf=is_host={int(hosts_rdzv)}"]
    cmd += [f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.2"]
    if sanitizer:
        # each rank: compute-sanitizer (its own log file per process) -> python -m fuzz.rank_worker
        return cmd + ["--no-python", *sanitizer_command(sanitizer, os.path.join(logdir, "sanitizer-%p.log")),
                      sys.executable, "-u", "-m", "fuzz.rank_worker"]
    return cmd + ["--start-method=fork", "--run-path", os.path.join(os.path.dirname(__file__), "rank_main.py")]


def sanitizer_command(tool: str, log_file: str) -> list[str]:
    """compute-sanitizer running ``tool`` (``memcheck``, ``racecheck``, ...), before the program it runs; the ranks'
    and the race canary's (:mod:`fuzz.race_canary`). Host API errors are not reported (CuTe DSL's architecture
    probe makes some on purpose)."""
    return ["compute-sanitizer", f"--tool={tool}", "--report-api-errors=no", "--print-limit=50",
            f"--log-file={log_file}"]


def first_failure(torchrun_log: str) -> tuple[int, int] | None:
    """(rank, exit code) of torchrun's "Root Cause (first observed failure)", if it printed one."""
    root = torchrun_log.split("Root Cause", 1)
    if len(root) < 2:
        return None
    found = _FAILURE.search(root[1])
    return (int(found.group(1)), int(found.group(2))) if found else None


def failures(torchrun_log: str) -> list[tuple[int, int]]:
    """(rank, exit code) of every rank torchrun reports failed, its root cause first. The root cause alone
    is not enough: torchrun stamps failures to the second and breaks ties by local rank, so a rank that
    crashed because its peer exited (gloo's SIGSEGV on a reset connection) can be named "first" in place
    of the peer that really died first."""
    first = first_failure(torchrun_log)
    out = [first] if first else []
    for found in _FAILURE.finditer(torchrun_log):
        pair = (int(found.group(1)), int(found.group(2)))
        if pair not in out:
            out.append(pair)
    return out


_FAILURE = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


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
