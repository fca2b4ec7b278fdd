"""Ranks side by side on one GPU: the gate's ``--mps`` mode.

On shared-gpu the GPU time-slices the ranks' contexts (1.8-2.4 ms a slice, 20th session), so one rank's kernel runs
at a time and a W-rank fused call spins away up to W - 1 slices waiting for peers that are not scheduled. Under MPS
(one server context for every client) the ranks' kernels run at once. The fused kernel's deadlock freedom rests on
its persistent grid being co-resident with its peers' (design record, kernel/fused/gemm_rs.py): under MPS that
holds only when the clients' SM shares sum to at most the GPU and no clustered grid is promised (the wrapper gives
an MPS client none: ``kernel.fused.wrapper.mps_client``). So every rank of a pool gets
``100 // (pools per GPU x W)`` percent (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), and the server is the run's own
(a private pipe folder, quit at the end): the card's settings are never touched.

What a run under MPS does not cover: the clustered tile configs (an MPS client compiles none) and the time-sliced
interleavings; the default mode covers both. The gate's summary says which mode ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile

from .config import MPS_ENV as MODE_ENV  # the ranks are MPS clients of the gate's server

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
SHARE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CONTROL = "nvidia-cuda-mps-control"
#: Clients one MPS server takes per GPU (Volta and later).
MAX_CLIENTS = 48


class MpsError(RuntimeError):
    """MPS cannot run this gate: no control binary, a server that did not start, more clients than it takes."""


def share_percent(world_size: int, pools_per_gpu: int) -> int:
    """Each rank's share of the GPU's SMs when ``pools_per_gpu`` pools of ``world_size`` ranks may run on it at
    once: the shares sum to at most 100 %, so every rank's persistent grid is co-resident with its peers'."""
    clients = world_size * pools_per_gpu
    if world_size < 1 or pools_per_gpu < 1:
        raise ValueError(f"world size and pools per GPU must be positive, not {world_size}, {pools_per_gpu}")
    if clients > MAX_CLIENTS:
        raise MpsError(f"{pools_per_gpu} pool(s) of W = {world_size} are {clients} MPS clients on one GPU; a server "
                       f"takes {MAX_CLIENTS}: lower --pools-per-gpu or the world sizes")
    return max(1, 100 // clients)


def active() -> bool:
    """Whether this process's rank pools are the gate's MPS clients (``ci/gate --mps`` exported it)."""
    return os.environ.get(MODE_ENV) == "1" and bool(os.environ.get(PIPE_ENV))


def rank_share_env(topology: str, world_size: int, pools_per_gpu: int) -> dict[str, str]:
    """What a pool's ranks add to their environment under ``--mps``: their SM share (shared-gpu only)."""
    if not active() or topology != "shared-gpu":
        return {}
    return {SHARE_ENV: str(share_percent(world_size, pools_per_gpu))}


def pools_per_gpu(world_sizes: list[int], default: int) -> int:
    """Pools per GPU under MPS when the user named none: ``default``, fewer where the largest W would make more
    clients than a server takes (W = 16: 3 pools of 16, a 2 % share each)."""
    return max(1, min(default, MAX_CLIENTS // max(world_sizes or [1])))


def requested(value: str | None, topologies: list[str]) -> bool:
    """Whether ``--mps`` asks for the mode; :class:`MpsError` where it cannot hold (another value than 0 or 1,
    a topology other than shared-gpu: multi-gpu ranks and shared-gpu places share GPUs, their shares would not be
    bounded together)."""
    if value in (None, "", "0"):
        return False
    if value != "1":
        raise MpsError(f"--mps must be 0 or 1, not {value!r}")
    if topologies != ["shared-gpu"]:
        raise MpsError("--mps 1 runs shared-gpu ranks as MPS clients: it needs --topology shared-gpu alone, not "
                       f"{','.join(topologies) or 'every topology of the host'}")
    return True


def repro_flags(pools: int) -> str:
    """What a REPRO line adds when its case ran under the gate's MPS server: the same mode and the same share."""
    return f" --mps 1 --pools-per-gpu {pools}" if active() else ""


@contextlib.contextmanager
def server(log_dir: str):
    """A private MPS control daemon for the duration of the block, its log in ``log_dir``; yields the environment
    its clients need, exported into this process too, so the pytest sessions, pools and ranks it starts inherit it.
    The pipe folder is a new one in the temp dir (a unix socket's path is short). At the end the daemon is told to
    quit; it does once its last client has exited -- this process itself, if it used CUDA in the block (the
    gate's summary reads the GPU's name): then it is left to quit when this process ends."""
    binary = shutil.which(CONTROL)
    if binary is None:
        raise MpsError(f"--mps: no {CONTROL} on PATH")
    os.makedirs(log_dir, exist_ok=True)
    env = {PIPE_ENV: tempfile.mkdtemp(prefix="gemm-rs-mps-"), LOG_ENV: log_dir, MODE_ENV: "1"}
    child = dict(os.environ, **env)
    started = subprocess.run([binary, "-d"], env=child, capture_output=True, text=True, timeout=30)
    if started.returncode != 0:
        shutil.rmtree(env[PIPE_ENV], ignore_errors=True)
        raise MpsError(f"--mps: {CONTROL} -d exited {started.returncode}: {started.stderr.strip()}")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        quitting = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=child, text=True, start_new_session=True)
        try:
            quitting.communicate("quit\n", timeout=QUIT_WAIT_S)
            shutil.rmtree(env[PIPE_ENV], ignore_errors=True)
        except subprocess.TimeoutExpired:  # a client of this process still: the daemon quits when it ends
            pass


#: Seconds the end of :func:`server` waits for the daemon to quit before leaving it to quit on its own.
QUIT_WAIT_S = 10.0
