"""Where ranks run (CONTRACT.md, "Where it runs") and the environment every rank gets.

| topology   | ranks                | collectives           | device per rank        |
|------------|----------------------|-----------------------|------------------------|
| cpu        | W processes          | gloo                  | cpu                    |
| shared-gpu | W processes, one GPU | gloo (+ symm. memory) | the worker's leased GPU |
| multi-gpu  | one GPU per rank     | NCCL (+ gloo control) | cuda:LOCAL_RANK         |

Multicast stays off everywhere: MULTICAST_OFF is set for the ranks (and so for their children) by
default, whatever the caller's environment says.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass

from .config import BY_NAME, TOPOLOGY_ENV, current

TOPOLOGIES = ("cpu", "shared-gpu", "multi-gpu")

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

#: The kernel cache's variable, as fuzz/config.py declares it (kernel.fused.compile reads the same name; not
#: imported from there: the driver need not load the kernel package)
KERNEL_CACHE_ENV = BY_NAME["kernel_cache_dir"].env


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 — a broken CUDA setup means no GPU for us
        return 0


def gpu_count_hint() -> int:
    """GPUs on this host for a decision that only sizes work (how many xdist workers to start): NVML's count
    when torch is not imported yet and ``CUDA_VISIBLE_DEVICES`` does not narrow it, else :func:`gpu_count`.
    pytest's xdist controller asks it before starting its workers; ``import torch`` for the same answer took
    2.2 s there on an H200 host, all of it before the first worker started. A host where NVML sees a GPU torch
    cannot use gets more workers than it needs, never a different gate (the workers ask :func:`gpu_count`)."""
    import sys

    if "torch" not in sys.modules and os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        n = _nvml_device_count()
        if n is not None:
            return n
    return gpu_count()


def _nvml_device_count() -> int | None:
    """``nvmlDeviceGetCount`` through the driver's libnvidia-ml (no CUDA context), None without it."""
    import ctypes

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        return int(count.value) if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else None
    finally:
        lib.nvmlShutdown()


def available_topologies(count: int | None = None) -> list[str]:
    """The topologies a host with ``count`` GPUs (default :func:`gpu_count`) offers."""
    n = gpu_count() if count is None else count
    out = ["cpu"]
    if n >= 1:
        out.append("shared-gpu")
    if n >= 2:
        out.append("multi-gpu")
    return out


def default_pools_per_gpu(cpus: int | None = None) -> int:
    """Pools per GPU when nobody says: shared-gpu cases are host-bound (a pool is W processes plus a
    driver), so a quarter of the cores, between 1 and 4."""
    return max(1, min(4, (cpus or os.cpu_count() or 1) // 4))


def pools_per_gpu(value: str | None = None) -> int:
    """Rank pools that may share one GPU at once (``--pools-per-gpu``, ``GEMM_RS_POOLS_PER_GPU``; default
    :func:`default_pools_per_gpu`, for ``ci/gate`` and a plain ``pytest fuzz/`` alike). shared-gpu cases are
    tiny and host-bound, so on a many-core host several pools (each its own W processes) time-slicing one GPU
    finish a campaign several times sooner; every case still has its deadline."""
    if value is None:
        value = current().pools_per_gpu or str(default_pools_per_gpu())
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"GEMM_RS_POOLS_PER_GPU must be a positive integer, not {value!r}") from None
    if n < 1:
        raise ValueError(f"GEMM_RS_POOLS_PER_GPU must be a positive integer, not {value!r}")
    return n


def gate_kernel_cache_dir() -> str:
    """The host-wide kernel cache the gate's GPU ranks use (kernel/fused/compile.py: each (N, K, W, tile,
    protocol) compiled once per host and loaded by every other rank and run, about 10 ms instead of a
    1-5 s compile): ``GEMM_RS_KERNEL_CACHE_DIR`` when set (``none`` turns it off), else
    ``$XDG_CACHE_HOME/gemm-rs/kernels`` (``~/.cache/...``). Entries are keyed by a digest of the key, the
    CuTe DSL version and the kernels' source, so an edit never loads a stale kernel."""
    value = os.environ.get(KERNEL_CACHE_ENV)
    if value is not None:
        return value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gemm-rs", "kernels")


#: torch answers torch.cuda.is_available() / device_count() through NVML, without initialising CUDA.
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"


def rank_env(topology: str, gpus: list[int] | None = None) -> dict[str, str]:
    """Environment additions for the rank processes of a pool."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; one of {TOPOLOGIES}")
    env = dict(MULTICAST_OFF)
    env[TOPOLOGY_ENV] = topology
    # torchrun's agent asks torch.cuda.is_available() (LaunchConfig's NUMA default) before it forks the ranks
    # (fuzz.node.torchrun_command): asked through NVML it leaves CUDA uninitialised there, so a forked rank may
    # initialise it (through the driver, torch refuses CUDA in a child forked after it: "Cannot re-initialize CUDA
    # in forked subprocess").
    env[NVML_CHECK_ENV] = "1"
    if topology == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    if topology != "cpu":
        env[KERNEL_CACHE_ENV] = gate_kernel_cache_dir()
    if topology == "shared-gpu":
        env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(gpus[0])
    elif gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    return env


@dataclass
class GpuLease:
    """GPUs held by this process (an xdist worker) through lock files, so workers never overlap."""

    gpus: list[int]
    _files: list

    @classmethod
    def joined(cls, leases: list[GpuLease]) -> GpuLease:
        """One lease holding everything ``leases`` hold (released together)."""
        return cls(sorted({g for lease in leases for g in lease.gpus}), [f for lease in leases for f in lease._files])

    def release(self) -> None:
        for f in self._files:
            try:
                fcntl.flock(f, fcntl.LOCK_UN)
            finally:
                f.close()
        self._files = []


def lease_gpus(count: int, *, total: int | None = None, lock_dir: str | None = None,
               wait_s: float = 0.0, prefer: int = 0, slots: int = 1) -> GpuLease | None:
    """Take ``count`` GPUs nobody else on this host holds, trying from GPU ``prefer`` on, waiting up to
    ``wait_s`` for other holders (another pytest run on the same host). None if not possible.

    ``slots`` > 1 (one GPU shared by several pools, :func:`pools_per_gpu`) leases one of ``slots``
    places instead, and ``prefer`` numbers places: for one GPU (a shared-gpu pool) place v is slot
    v // total of GPU v % total; for ``count`` GPUs (a multi-gpu pool, one rank per GPU) the GPUs form
    ``total // count`` disjoint sets of adjacent GPUs and place v is slot v // sets of set v % sets
    (several multi-gpu pools of correctness cases time-slice the same GPUs, as shared-gpu pools do). A
    multi-gpu pool's slot 0 takes the whole-GPU locks of ``slots == 1`` leases (so the first pool of a set and
    a whole-GPU lease exclude each other); its other slots, and shared-gpu slots, take locks of their own and
    time-slice beside either -- correctness cases only, never a timing."""
    total = gpu_count() if total is None else total
    if count <= 0 or count > total:
        return None
    if slots == 1:
        return _first_free([prefer], wait_s, lambda _v: _try_lease(count, total, lock_dir, prefer))
    sets = total // count  # one GPU (count 1): every GPU is a set
    places = [(prefer + i) % (sets * slots) for i in range(sets * slots)]

    def take(v: int) -> GpuLease | None:
        first, s = (v % sets) * count, v // sets
        gpus = list(range(first, first + count))
        if count == 1:
            return _lock_all(lock_dir, gpus, [f"gpu{first}.slot{s}.lock"])
        return _lock_all(lock_dir, gpus, [f"gpu{g}.lock" if s == 0 else f"gpu{g}.multi{s}.lock" for g in gpus])

    return _first_free(places, wait_s, take)


#: GPU memory one shared-gpu rank may take (GiB): its CUDA context and kernels, its symmetric workspace, the
#: tensors of the largest case it runs. Measured on one H200 (140 GiB; ci gate of ``fused``, 2026-12-01): two
#: W = 16 pools beside each other (32 ranks, 2.7-5.0 GiB each) ran the GPU out of memory -- a harness error in
#: two cases, the verdict FAIL; with the tokens and the rank's cache trim (fuzz/rank_worker.py) the W = 1, 16
#: gate peaked at 87.8 GiB for 17 ranks (5.2 GiB each), the W = 2, 4, 8 gate at 55.9 GiB for 20-22.
RANK_GPU_GIB = 5.5


def gpu_memory_gib(gpu: int) -> float | None:
    """Total memory of GPU ``gpu`` (GiB), from ``nvidia-smi`` (no CUDA context in the driver), else from
    torch; None when neither can tell."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            res = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                                  "-i", str(gpu)], capture_output=True, text=True, timeout=30)
            if res.returncode == 0 and res.stdout.strip():
                return float(res.stdout.split()[0]) / 1024.0
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    try:
        import torch

        return torch.cuda.get_device_properties(gpu).total_memory / 2**30
    except Exception:  # noqa: BLE001 — no answer: the caller's default
        return None


def rank_budget(gpu: int, memory_gib: float | None = None) -> int:
    """Ranks of shared-gpu pools that may live on GPU ``gpu`` at once: its memory over :data:`RANK_GPU_GIB`,
    at least 1 (a pool larger than that runs alone on the GPU). Unknown memory: no limit but the pools'."""
    memory_gib = gpu_memory_gib(gpu) if memory_gib is None else memory_gib
    if memory_gib is None:
        return 1 << 10
    return max(1, int(memory_gib // RANK_GPU_GIB))


def lease_ranks(gpu: int, count: int, *, budget: int, lock_dir: str | None = None,
                wait_s: float = 0.0) -> GpuLease | None:
    """``count`` of GPU ``gpu``'s ``budget`` rank tokens (all of them when ``count`` exceeds the budget), for a
    shared-gpu pool of ``count`` ranks as long as it lives, so that the pools time-slicing one GPU never hold
    more ranks than its memory takes (:data:`RANK_GPU_GIB`); None if they are not all free within ``wait_s``.

    All or none, and no deadlock: a leaser first takes the GPU's queue lock and only its holder takes tokens
    (keeping those it has while it waits for the rest, which only releases free); the queue lock goes back as
    soon as the tokens are complete or the wait is over."""
    import time

    need = max(1, min(count, budget))
    deadline = time.monotonic() + wait_s
    # the queue lock is held for a moment by each leaser in turn (the pools of a campaign's workers start
    # together): polled often, or each worker after the first waited a whole second more to start its pool
    queue = _first_free([gpu], wait_s, lambda g: _lock(lock_dir, f"gpu{g}.rank-queue.lock"), poll_s=QUEUE_POLL_S)
    if queue is None:
        return None
    held: dict[int, object] = {}
    try:
        while True:
            for i in range(budget):
                if len(held) == need:
                    break
                if i not in held:
                    f = _lock(lock_dir, f"gpu{gpu}.rank{i}.lock")
                    if f is not None:
                        held[i] = f
            if len(held) == need:
                lease, held = GpuLease([gpu], list(held.values())), {}
                return lease
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)
    finally:
        GpuLease([], list(held.values()) + [queue]).release()


#: Seconds between a leaser's tries for a GPU's rank-queue lock (:func:`lease_ranks`).
QUEUE_POLL_S = 0.02


def default_lock_dir() -> str:
    """Where GPU leases live: ``GEMM_RS_GPU_LOCK_DIR``, else one folder per host in the temp dir (runs that
    should not see each other's leases, e.g. two campaigns deliberately sharing a GPU, set it apart)."""
    return current().gpu_lock_dir or os.path.join(tempfile.gettempdir(), "gemm-rs-gpu-locks")


def _lock(lock_dir: str | None, name: str):
    """The open, exclusively locked lock file ``name``, or None if someone holds it."""
    lock_dir = lock_dir or default_lock_dir()
    os.makedirs(lock_dir, exist_ok=True)
    f = open(os.path.join(lock_dir, name), "w")  # noqa: SIM115 — kept open while leased
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def _first_free(places: list[int], wait_s: float, take, poll_s: float = 1.0):
    """``take(v)`` for each place in turn, again every ``poll_s`` seconds until one gives a lease (or a lock) or
    ``wait_s`` is over; None then."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        for v in places:
            lease = take(v)
            if lease is not None:
                return lease
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def _lock_all(lock_dir: str | None, gpus: list[int], names: list[str]) -> GpuLease | None:
    """A lease of ``gpus`` holding every lock file of ``names``, or None (and none held) if one is taken."""
    files = []
    for name in names:
        f = _lock(lock_dir, name)
        if f is None:
            GpuLease([], files).release()
            return None
        files.append(f)
    return GpuLease(gpus, files)


def _try_lease(count: int, total: int, lock_dir: str | None, prefer: int) -> GpuLease | None:
    held, files = [], []
    for g in [(prefer + i) % total for i in range(total)]:
        f = _lock(lock_dir, f"gpu{g}.lock")
        if f is None:
            continue
        held.append(g)
        files.append(f)
        if len(held) == count:
            return GpuLease(held, files)
    GpuLease(held, files).release()
    return None
