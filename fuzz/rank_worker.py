"""One rank of a pool: torchrun forks it and runs ``fuzz/rank_main.py`` (``fuzz.node.torchrun_command``), or,
under a sanitizer, ``torchrun ... compute-sanitizer ... python -m fuzz.rank_worker``.

Joins the process group for its topology, connects to the driver (``_GEMM_RS_DRIVER``=host:port), says hello (rank,
node, pid, ``sys.flags.optimize``, device), then runs cases until told to stop, sending each case's result (its
checks, or the traceback of an exception that escaped ``run_case``, a GPU fault of the case's work included:
``run_case`` waits for it) as soon as it has it — no collective between a case's checks and its result, no verdict
agreed among ranks. Its stdout/stderr go to
``$_GEMM_RS_LOGDIR/rank{r}.log``; the stack signal (``fuzz.config.STACK_SIGNAL``) makes faulthandler write every
thread's stack to ``rank{r}.stacks`` (how the driver collects stacks from a hung rank); it dies with its parent (no
orphans).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        # PR_SET_PTRACER, PR_SET_PTRACER_ANY: the driver's debugger may read this rank's native stacks when it
        # hangs (fuzz.native_stacks), whatever Yama's ptrace_scope; EINVAL without Yama, ignored.
        libc.prctl(0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF))
    except OSError:
        pass


def _default_signals() -> None:
    """The signal dispositions of a fresh interpreter. torchrun forks the ranks (``fuzz.node.torchrun_command``) from
    its agent, whose handlers turn SIGTERM, SIGHUP and SIGQUIT into an exception: a rank would catch it as its case's
    error and live on when torchrun stops the ranks after one died (torchrun waited out its shutdown timeout)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_when_driver_dies(driver_pid: int) -> None:
    import threading

    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(driver_pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="driver-watchdog", daemon=True).start()


def _stack_requests() -> None:
    """The one thread the driver's stack request reaches (see :func:`_route_stack_requests`)."""
    from .config import STACK_SIGNAL

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {STACK_SIGNAL})
    threading.Event().wait()


def _route_stack_requests() -> None:
    """The stack signal (:data:`fuzz.config.STACK_SIGNAL`) blocked in this thread and in every thread created
    from it from now on (torch's, CUDA's, gloo's, the watchdog), unblocked in one idle Python thread: the
    driver's process-directed signal always lands there, where faulthandler's C handler dumps every thread's
    stack even while the main thread is stuck in C code, whatever thread the kernel would have picked."""
    from .config import STACK_SIGNAL

    signal.pthread_sigmask(signal.SIG_BLOCK, {STACK_SIGNAL})
    threading.Thread(target=_stack_requests, name="stack-requests", daemon=True).start()


#: Modules torch imports lazily at a GPU rank's first case whatever the implementation: symmetric memory's first
#: allocation pulls in torch.fx's symbolic shapes and with them sympy (2.2-2.8 s per process in the first case
#: of every GPU pool, profiled on an H200 host whose packages carry no bytecode cache).
PRELOAD = ("torch.fx.experimental.symbolic_shapes",)


def _preload(modules) -> threading.Thread | None:
    """Import ``modules`` on a daemon thread while the rank joins its group and waits for its first case. A
    module that fails here is ignored: the case that needs it imports it again and reports the error there.
    Returns the thread: the rank joins it before its first case runs. Imports on two threads at once are not
    safe for packages whose modules import each other: where each thread holds one module's lock and wants the
    other's, Python breaks the cycle by handing one of them a partially initialised module (an ImportError or
    AttributeError in that thread). A case's first construction imports the CuTe DSL and compiles a kernel for its
    cluster occupancy query; a rank whose query failed chose other kernels than its peers (a suspect for the 13th
    session's W = 8 trap -- not reproduced: on the CPU, the imports and a dummy compile beside the preload
    succeeded in 10 tries)."""
    import importlib

    def run():
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001, S112 — reported by the import that needs it
                continue

    if not modules:
        return None
    thread = threading.Thread(target=run, name="gemm-rs-preload", daemon=True)
    thread.start()
    return thread


class CaseProfiler:
    """``GEMM_RS_PROFILE_RANKS=<folder>``: rank 0 of a pool profiles its cases with cProfile -- the first case
    alone (``<topology>-W<W>-<pid>-first.prof``: the pool's start-up work), then every later case into one
    statistic (``...-rest.prof``, rewritten every :data:`EVERY` cases and at the end). A context manager; a
    no-op when the setting is off or on other ranks."""

    EVERY = 20

    def __init__(self, path: str | None):
        self.path, self.cases, self.profile = path, 0, None

    @classmethod
    def for_rank(cls, rank: int, world_size: int, topology: str) -> CaseProfiler:
        from .config import current

        folder = current().profile_ranks
        if not folder or rank != 0:
            return cls(None)
        os.makedirs(folder, exist_ok=True)
        return cls(os.path.join(folder, f"{topology}-W{world_size}-{os.getpid()}"))

    def __enter__(self):
        if self.path is not None:
            import cProfile

            if self.profile is None:
                self.profile = cProfile.Profile()
            self.profile.enable()
        return self

    def __exit__(self, *exc):
        if self.path is not None:
            self.profile.disable()
            self.cases += 1
            if self.cases == 1:
                self.profile.dump_stats(self.path + "-first.prof")
                self.profile = None  # the later cases go into a statistic of their own
            elif self.cases % self.EVERY == 0:
                self.profile.dump_stats(self.path + "-rest.prof")
        return False

    def close(self) -> None:
        if self.path is not None and self.profile is not None:
            self.profile.dump_stats(self.path + "-rest.prof")


#: Bytes of cached GPU memory a rank keeps between cases; more goes back to the driver after the case
#: (``torch.cuda.empty_cache``): cases of a campaign have every size, and a rank that kept the blocks of its
#: largest one would hold them while its GPU's other pools run theirs (fuzz.topology.RANK_GPU_GIB).
CACHE_KEEP_BYTES = 1 << 30


def trim_gpu_cache(torch_mod, device, keep: int = CACHE_KEEP_BYTES) -> bool:
    """After a case: give the caching allocator's unused blocks back when it reserves more than ``keep`` bytes
    on ``device`` (a CUDA device; other devices keep theirs). Whether it did."""
    if device.type != "cuda" or torch_mod.cuda.memory_reserved(device) <= keep:
        return False
    torch_mod.cuda.empty_cache()
    return True


def between_cases(torch_mod, device, describe, broken: str | None = None) -> str | None:
    """The rank's step after a case's result went out (:func:`trim_gpu_cache`); the error every later case of
    this rank gets if its CUDA context is gone (``describe``: the exception's text), else ``broken`` (the error an
    earlier case's step gave, kept: a context once gone stays gone, though a later trim may have nothing to give back
    and raise nothing).

    The rank stays alive either way: dying here, torchrun would take every peer down before the driver asked the
    ranks that gave no result where they are (12th and 13th sessions, one H200: a W = 8 case's ranks 0-5 hit the
    kernels' spin-timeout trap, the trim raised their CUDA error again and they exited; ranks 6 and 7, silent,
    were killed with them and their stacks lost). It still answers the stack signal and ``stop``."""
    try:
        trim_gpu_cache(torch_mod, device)
    except Exception as exc:  # noqa: BLE001 -- the case's own error has gone out already
        return broken or f"this rank's CUDA context broke after an earlier case:\n{describe(exc)}"
    return broken


def main() -> int:
    stamps = {"main": time.time()}  # wall-clock stages of the start-up, sent with the hello (fuzz.pool.startup_line)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    from .config import DRIVER_ENV, DRIVER_PID_ENV, IMPL_ENV, LOGDIR_ENV, NODE_ENV, STACK_SIGNAL, TOPOLOGY_ENV

    logdir = os.environ[LOGDIR_ENV]
    log = open(os.path.join(logdir, f"rank{rank}.log"), "a", buffering=1)  # noqa: SIM115
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    stacks = open(os.path.join(logdir, f"rank{rank}.stacks"), "a", buffering=1)  # noqa: SIM115
    faulthandler.enable(file=stacks, all_threads=True)
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True)
    _route_stack_requests()
    _default_signals()
    _die_with_parent()
    if os.environ.get(DRIVER_PID_ENV):  # the driver, or the node agent acting for it on this host
        _exit_when_driver_dies(int(os.environ[DRIVER_PID_ENV]))

    import torch
    import torch.distributed as dist

    from .topology import NVML_CHECK_ENV

    stamps["torch"] = time.time()
    topology = os.environ.get(TOPOLOGY_ENV, "cpu")
    if topology != "cpu" and torch.cuda._is_in_bad_fork():
        raise RuntimeError("torchrun's agent initialised CUDA before it forked this rank, so this rank cannot use "
                           f"it: the agent must ask for GPUs through NVML ({NVML_CHECK_ENV}=1, fuzz.topology.rank_env)"
                           f"; here {NVML_CHECK_ENV}={os.environ.get(NVML_CHECK_ENV)!r}")
    from kernel.registry import load_implementation

    from . import phases
    from .case import Case
    from .channel import ChannelClosed, connect
    from .execute import RankContext, describe_exception, run_case

    try:
        impl_factory = load_implementation(os.environ[IMPL_ENV])
        load_error = None
    except Exception as exc:  # noqa: BLE001 — reported to the driver, which fails the case
        impl_factory, load_error = None, describe_exception(exc)
    stamps["impl"] = time.time()
    preloading = None
    if topology != "cpu":  # what the GPU paths import lazily (the cpu topology's ranks need none of it)
        preloading = _preload(PRELOAD + tuple(getattr(impl_factory, "preload_modules", ())))
    if topology == "cpu":
        device = torch.device("cpu")
    elif topology == "shared-gpu":
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cuda", local_rank)
    mps = None  # cpu: no GPU, no MPS
    if device.type == "cuda":
        torch.cuda.set_device(device)
        from kernel.checks import mps_client

        mps = mps_client(device.index or 0)  # an MPS client's failures say so (fuzz.pool.mps_note)
    stamps["device"] = time.time()
    backend = "nccl" if topology == "multi-gpu" else "gloo"
    dist.init_process_group(backend=backend)
    stamps["group"] = time.time()
    ctx = RankContext(impl_factory, rank=rank, world_size=world_size, device=device, group=None,
                      topology=topology)
    chan = connect(os.environ[DRIVER_ENV])
    node = int(os.environ.get(NODE_ENV, "0"))
    chan.send({"type": "hello", "rank": rank, "node": node, "pid": os.getpid(), "optimize": sys.flags.optimize,
               "device": str(device), "mps": mps, "torch": torch.__version__, "backend": backend,
               "stamps": stamps})
    profiler = CaseProfiler.for_rank(rank, world_size, topology)
    broken = None
    while True:
        try:
            msg = chan.recv()
        except ChannelClosed:
            break
        if msg.get("type") == "stop":
            break
        if msg.get("type") != "case":
            continue
        t0 = time.perf_counter()
        if preloading is not None:  # no case beside imports in flight (_preload); the wait is the first case's
            preloading.join()
            print(f"[rank {rank}] preloads done {time.time() - stamps['main']:.2f} s after main", flush=True)
            preloading = None
        checks, error = [], load_error or broken
        phases.begin()
        if error is None:
            try:
                with profiler:
                    checks = run_case(ctx, Case.from_json(msg["case"]))
            except BaseException as exc:  # noqa: BLE001 — every failure goes back to the driver
                error = describe_exception(exc)
                if ctx.calls is not None and ctx.calls.trail:
                    error += "\n" + ctx.calls.trail_text()
        seconds = time.perf_counter() - t0
        # The result goes to the driver now, before any cross-rank collective: the driver alone judges,
        # and a rank whose exception left its peers blocked in a collective still gets its report out.
        chan.send({"type": "result", "id": msg["id"], "rank": rank, "error": error,
                   "checks": [c.to_json() for c in checks],
                   "seconds": seconds, "phases": phases.end(seconds), "optimize": sys.flags.optimize,
                   "mps": mps})
        broken = between_cases(torch, device, describe_exception, broken)
    profiler.close()
    if preloading is not None:
        preloading.join(timeout=60)
    ctx.close()
    chan.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
