"""A spare torchrun agent: started before a pool needs one, it has imported torch by the time the pool starts.

A pool's start (:meth:`fuzz.pool.RankPool.start`) used to wait for its torchrun agent's ``import torch``
(2.4-3.4 s on an H200 host, 1.8-2.7 s on the 2-core CI machine) before the agent forked the first rank. A
spare is ``python -m fuzz.warm_agent``: it imports ``torch.distributed.run`` and waits for one order on its
stdin -- the torchrun arguments, environment, working directory and log file of a pool -- then *becomes* that
pool's agent: its output goes to the pool's log, its environment and directory are the pool's, and it runs
torchrun's own ``main`` with the pool's arguments (the same code ``python -m torch.distributed.run`` runs).
Its pid is the agent's pid: the pool pins ranks under it and signals its process group as before.

Only a spare whose interpreter and import-time environment match the pool's is used (:func:`spare_key`): the
``PYTHON*`` variables (optimisation level, path, buffering), the OpenMP/MKL thread settings the runtime reads
when torch loads, the loader's ``LD_*`` and torch's ``TORCH_*`` (but ``TORCH_SYMM_MEM_*``, read when symmetric
memory is first used, in a rank). Anything else -- the driver's address, the implementation, the GPUs --
comes with the order, before torchrun runs; a spare never touches CUDA. Any mismatch, a spare that died, or
none at hand: the pool starts its agent as a new process, as it always did (:func:`launch`).

A spare that gets no order exits when its stdin closes (the process that spawned it is gone) and is killed
when that process exits (:func:`discard_all`)."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

#: Environment prefixes a spare's imports read (its key: :func:`spare_key`), and those within them read later.
KEYED_PREFIXES = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "TORCH_")
LAZY_PREFIXES = ("TORCH_SYMM_MEM_",)
#: The torchrun command a spare can stand in for: ``[sys.executable, "-m", "torch.distributed.run", ...]``.
TORCHRUN_MODULE = "torch.distributed.run"

_SPARES: dict[tuple, subprocess.Popen] = {}


def spare_key(env: dict[str, str], cwd: str) -> tuple:
    """What a spare started with ``env`` in ``cwd`` has fixed by the time it takes an order."""
    keyed = sorted((k, v) for k, v in env.items() if k.startswith(KEYED_PREFIXES) and not k.startswith(LAZY_PREFIXES))
    return (sys.executable, os.path.abspath(cwd), tuple(keyed))


def spawn(env: dict[str, str], cwd: str) -> None:
    """Start a spare for pools whose agent environment matches ``env`` (none if one is already waiting)."""
    key = spare_key(env, cwd)
    held = _SPARES.get(key)
    if held is not None and held.poll() is None:
        return
    log = os.path.join(tempfile.gettempdir(), f"gemm-rs-warm-agent-{os.getpid()}-{time.monotonic_ns()}.log")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fuzz.warm_agent", log], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.gemm_rs_log = log  # type: ignore[attr-defined]
    _SPARES[key] = proc


def launch(cmd: list[str], env: dict[str, str], cwd: str, log_file) -> subprocess.Popen | None:
    """Hand ``cmd`` (a torchrun command) to a matching spare, its output to ``log_file`` (open for writing): the
    spare, now the pool's agent; None if no spare can stand in (the caller starts the agent itself)."""
    if cmd[:3] != [sys.executable, "-m", TORCHRUN_MODULE]:
        return None
    proc = _SPARES.pop(spare_key(env, cwd), None)
    if proc is None:
        return None
    if proc.poll() is not None:
        _forget(proc)
        return None
    log_file.write(f"[gemm-rs] torchrun agent: the warm agent pid {proc.pid} (fuzz/warm_agent.py; its output "
                   f"before this pool: {proc.gemm_rs_log})\n")
    log_file.flush()
    order = {"argv": cmd[3:], "env": env, "cwd": os.path.abspath(cwd), "log": log_file.name}
    try:
        proc.stdin.write((json.dumps(order) + "\n").encode())
        proc.stdin.close()
    except OSError:  # it died between the poll and the order
        _kill(proc)
        return None
    return proc


def discard_all() -> None:
    """Kill every spare this process holds (at exit; a spare also exits by itself when its stdin closes)."""
    while _SPARES:
        _kill(_SPARES.popitem()[1])


def _kill(proc: subprocess.Popen) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except OSError:
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: it and anything it started
        except OSError:
            pass
        proc.wait()
    _forget(proc)


def _forget(proc: subprocess.Popen) -> None:
    log = getattr(proc, "gemm_rs_log", None)
    if log and os.path.exists(log) and os.path.getsize(log) == 0:
        os.unlink(log)


atexit.register(discard_all)


def serve(argv: list[str]) -> int:
    """The spare's side: import, wait for the order, become the pool's torchrun agent."""
    import torch.distributed.run as torchrun  # what a pool's start waited for

    own_log = argv[0] if argv else None
    line = sys.stdin.buffer.readline()
    sys.stdout.flush()
    sys.stderr.flush()
    if own_log and os.path.exists(own_log) and os.path.getsize(own_log) == 0:
        os.unlink(own_log)
    if not line:  # whoever spawned us is gone, or let us go
        return 0
    order = json.loads(line)
    fd = os.open(order["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["env"])
    sys.argv = ["torchrun", *order["argv"]]
    torchrun.main(order["argv"])
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
