"""Native (C/C++) stacks of stuck ranks, next to their Python stacks, for a HANG whose Python stacks only say
"inside C code" (a kernel compile, ``cudaStreamSynchronize`` on a spinning kernel, a gloo or NCCL wait).

Every living rank of the node is read at once, each with the first tool this host has:

* ``gdb -p <pid> -batch`` (``thread apply all bt``): the frames of every thread;
* ``py-spy dump --native --pid <pid>``;
* else ``/proc/<pid>/task/*``: each thread's name, state, kernel wait channel and system call (what the
  kernel says the thread is blocked in, without a debugger).

Ranks allow the attach themselves (``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`` in ``fuzz.rank_worker``), so
a Yama ``ptrace_scope`` of 1 does not stop the driver's debugger. Whether to dump is the setting
``native_stacks`` (``GEMM_RS_NATIVE_STACKS``): ``auto`` (the default) dumps on GPU topologies, where C-level
hangs live and a pool's hang is rare and expensive anyway; ``on`` / ``off`` everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

#: Seconds every rank's native dump may take together (gdb loads libtorch's symbols: seconds per process).
NATIVE_WAIT_S = 60.0
#: Frames per thread kept from a debugger's backtrace.
FRAMES = 24


def wanted(setting: str | None, topology: str) -> bool:
    """Whether a pool on ``topology`` dumps native stacks under the setting ``setting`` (auto|on|off)."""
    value = (setting or "auto").strip().lower()
    if value not in ("auto", "on", "off", "1", "0"):
        raise ValueError(f"GEMM_RS_NATIVE_STACKS must be auto, on or off, not {setting!r}")
    if value == "auto":
        return topology != "cpu"
    return value in ("on", "1")


def _command(pid: int) -> list[str] | None:
    gdb = shutil.which("gdb")
    if gdb:
        return [gdb, "-p", str(pid), "-batch", "-nx", "-q", "-ex", "set pagination off",
                "-ex", "set print thread-events off", "-ex", f"thread apply all bt {FRAMES}"]
    pyspy = shutil.which("py-spy")
    if pyspy:
        return [pyspy, "dump", "--native", "--pid", str(pid)]
    return None


def _keep(line: str) -> bool:
    """The lines of a debugger's output worth reading: all but gdb's thread-event, symbol-loading and warning
    noise (thread headers and ``#n`` frames stay)."""
    return not line.lstrip().startswith(("[", "warning:", "Reading", "Using", "0x"))


def _short(line: str, width: int = 240) -> str:
    """A frame line cut to ``width`` characters (C++ template signatures run to thousands)."""
    return line if len(line) <= width else line[:width - 5] + " [..]"


def proc_threads(pid: int, why: str = "no gdb or py-spy on this host") -> str:
    """Each thread's name, state, kernel wait channel and system call, from /proc (no debugger needed); ``why``:
    why /proc's view is what the rank gets."""
    base = f"/proc/{pid}/task"
    try:
        tids = sorted(os.listdir(base), key=int)
    except OSError as exc:
        return f"(no /proc entry for pid {pid}: {exc})"
    lines = [f"pid {pid}: {len(tids)} threads ({why}: /proc's view)"]
    for tid in tids:
        def read(name: str, tid: str = tid) -> str:
            try:
                with open(os.path.join(base, tid, name)) as f:
                    return f.read().strip()
            except OSError:
                return "?"
        state = next((ln.split(":", 1)[1].strip() for ln in read("status").splitlines() if ln.startswith("State:")),
                     "?")
        syscall = read("syscall").split(" ")[0]
        lines.append(f"  tid {tid} {read('comm')!r}: {state}, wchan {read('wchan') or '-'}, syscall {syscall}")
    return "\n".join(lines)


def dump(pids: dict[int, int], timeout: float = NATIVE_WAIT_S) -> dict[int, str]:
    """rank -> native stacks of the process ``pids[rank]``, every rank at once, within ``timeout`` seconds."""
    running: dict[int, subprocess.Popen] = {}
    out: dict[int, str] = {}
    for r, pid in pids.items():
        cmd = _command(pid)
        if cmd is None:
            out[r] = proc_threads(pid)
            continue
        try:
            running[r] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        except OSError as exc:
            out[r] = f"({cmd[0]} could not start: {exc})\n{proc_threads(pid, f'{cmd[0]} could not start')}"
    end = time.monotonic() + timeout
    for r, p in running.items():
        tool, late = os.path.basename(p.args[0]), False
        try:
            text, _ = p.communicate(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            late = True
        kept = "\n".join(_short(ln) for ln in (text or "").splitlines() if _keep(ln)).strip()
        if late:  # what the debugger printed before it was killed, then /proc's view of every thread
            out[r] = "\n".join(x for x in (f"({tool} did not finish within {timeout:.0f}s)", kept,
                                            proc_threads(pids[r], f"{tool} did not finish")) if x)
        else:
            out[r] = kept or f"({tool} printed no stack)\n{proc_threads(pids[r], f'{tool} printed no stack')}"
    return dict(sorted(out.items()))


__all__ = ["NATIVE_WAIT_S", "dump", "proc_threads", "wanted"]
