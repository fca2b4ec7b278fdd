"""Ranks side by side on one GPU: the gate's ``--mps`` mode.

On shared-gpu the GPU time-slices the ranks' contexts (1.8-2.4 ms a slice, 20th session), so one rank's kernel runs
at a time and a W-rank fused call spins away up to W - 1 slices waiting for peers that are not scheduled. Under MPS
(one server context for every client) the ranks' kernels run at once. The fused kernel's deadlock freedom rests on
its persistent grid being co-resident with its peers' (design record, kernel/fused/gemm_rs.py): under MPS that
holds only when every client's grid fits at once: the SMs the clients of all pools that may run together actually
get sum to at most the GPU's, and no clustered grid is promised (the wrapper gives an MPS client none:
``kernel.fused.wrapper.mps_client``). A share is not what a client gets: on an H200, 3 % and 6 % both gave 8 SMs,
12 % gave 14 (25th session) -- shares summing to 96 % over 4 pools of W = 8 were 256 SMs' worth on a 132-SM GPU,
and the gate failed correct kernels on the spin-timeout trap (docs/evidence/2026-12-04-mps-gate/). So the run asks:
a client started at each candidate share reports its SM count (:func:`client_sms`), and the pools per GPU are the
most whose clients' SMs fit (:func:`pools_that_fit`); each rank of a pool of W gets ``100 // (pools x W)`` percent
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). The server is the run's own (a private pipe folder, quit at the end): the
card's settings are never touched.

What a run under MPS does not cover: the clustered tile configs (an MPS client compiles none) and the time-sliced
interleavings; the default mode covers both. The gate's summary says which mode ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
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


#: What a client at a share reports (run under the server's environment, the share set): its SM count.
PROBE = "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)"
#: Seconds a probe client may take (torch's import, the server's first context).
PROBE_TIMEOUT_S = 120.0


def candidate_shares(world_sizes: list[int], most: int) -> set[int]:
    """Every share :func:`pools_that_fit` may ask about (1 to ``most`` pools of each W), and 100 (the whole GPU)."""
    return {100} | {share_percent(w, p) for w in world_sizes for p in range(1, most + 1) if w * p <= MAX_CLIENTS}


def client_sms(shares: set[int], env: dict[str, str]) -> dict[int, int]:
    """share -> the SM count a client started at that share reports (one probe process per share, at once), under
    the server's environment ``env``; :class:`MpsError` when a probe cannot say."""
    procs = {p: subprocess.Popen([sys.executable, "-c", PROBE], env=dict(env, **{SHARE_ENV: str(p)}),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in sorted(shares)}
    sms, failed = {}, []
    for p, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = f"no answer in {PROBE_TIMEOUT_S:.0f} s. {err}"
        lines = out.split()
        if proc.returncode == 0 and lines and lines[-1].isdigit():
            sms[p] = int(lines[-1])
        else:
            failed.append(f"{p} %: exit {proc.returncode}, {err.strip()[-300:]}")
    if failed:
        raise MpsError("--mps: an MPS client could not say its SM count (" + "; ".join(failed) + ")")
    return sms


def pools_that_fit(world_sizes: list[int], most: int, sms: dict[int, int]) -> int:
    """The most pools per GPU, at most ``most``, whose ranks' persistent grids are co-resident whichever pools run
    at once: for every W, P pools of W ranks are at most :data:`MAX_CLIENTS` clients and take at most the GPU's SMs
    (``sms``: share -> the SM count a client at it got, 100 the whole GPU's). :class:`MpsError` where not even one
    pool of some W fits."""
    for pools in range(max(1, most), 0, -1):
        if all(w * pools <= MAX_CLIENTS and pools * w * sms[share_percent(w, pools)] <= sms[100]
               for w in world_sizes):
            return pools
    misfit = [w for w in world_sizes if w > MAX_CLIENTS or w * sms[share_percent(w, 1)] > sms[100]]
    raise MpsError(f"--mps: one pool of W = {misfit[0]} takes more than the GPU's {sms[100]} SMs as MPS clients (a "
                   "client's share is rounded up to a floor of SMs): lower the world sizes or run without --mps")


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
