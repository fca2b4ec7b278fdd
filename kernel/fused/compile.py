"""Compile cache of the Hopper kernels, reused for every shape, every M and every rank: the GEMM (one per
(config, arch)) and the fused GEMM + reduce-scatter (one per (config, W, protocol, arch, spin timeout, faults),
:func:`get_compiled_rs`); M, N, K and the rank are launch arguments, so one compile serves every layer of a
model and the W ranks of a group share it. :func:`get_compiled` and :func:`get_compiled_rs` return the cached
kernel *bound* to an (N, K) (:meth:`CompiledKernel.bound`), whose launches pass them.

M, N and K are run-time ``Int32`` arguments of the kernels (see :mod:`kernel.fused.gemm`), so no key has them.
Compilation needs no GPU: the target is named explicitly (``--gpu-arch sm_90a``), so it also runs on a CPU-only CI
machine. Each compile keeps its PTX (``--keep-ptx`` into a temporary directory, read back into memory, directory
removed) for tests that inspect the instructions.

Two levels of cache:

* in the process: one compiled kernel per key (a lock serialises compiles);
* on the host, across processes (opt-in: ``GEMM_RS_KERNEL_CACHE_DIR=/some/dir``): CuTe DSL 4.8.1's
  ``cute.compile`` never uses the DSL's own file cache (it forces ``no_cache``), but a compiled kernel can be
  exported (``export_to_c``: an object file holding the cubin and the host launcher) and loaded by another process
  (``cute.runtime.load_module``, about 10 ms instead of a 1-5 s compile). The entry of a key is a directory
  ``<digest>/`` with ``kernel.o`` and ``kernel.ptx``; the digest covers the key, the nvidia-cutlass-dsl version and
  the source of every module a kernel is traced from, so an edit or an upgrade never loads a stale kernel. The first
  process to need a key compiles it under a file lock while the others wait, then load it: one compile per key and
  host (a W = 8 pool compiles each tile config once, not eight times, and never again for another shape). A failed
  export is reported and the kernel used from memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

from .config import (
    DEFAULT_ARCH,
    DEFAULT_PROTOCOL,
    KERNEL_EXPERIMENTS,
    PUSH_ORDERS,
    SPIN_TIMEOUT_S,
    check_protocol,
    check_push_build,
    normalize_faults,
)
from .gemm import GemmConfig, HopperGemmBF16

#: Environment variable naming the host-wide kernel cache directory (unset or empty: no disk cache).
KERNEL_CACHE_ENV = "GEMM_RS_KERNEL_CACHE_DIR"
#: The modules every kernel is traced from: their text is part of a disk-cache digest.
_KERNEL_SOURCES = ("config.py", "gemm.py", "gemm_rs.py", "gemm_rs_push.py", "push_order.py", "rs_protocol.py",
                   "ptx.py", "compile.py")


@dataclass(frozen=True)
class CompileKey:
    config: GemmConfig
    arch: str = DEFAULT_ARCH


@dataclass(frozen=True)
class RsCompileKey:
    config: GemmConfig
    world_size: int
    arch: str = DEFAULT_ARCH
    spin_timeout_s: float = SPIN_TIMEOUT_S
    faults: frozenset = frozenset()  # fault-injected build (kernel.fused.config.KERNEL_FAULTS); empty: real
    protocol: str = DEFAULT_PROTOCOL
    order: str = ""  # push: the tile order (kernel.fused.config.PUSH_ORDERS); pull: ""
    experiment: str = ""  # push: a measurement-only build (kernel.fused.config.KERNEL_EXPERIMENTS); "": real


@dataclass
class CompiledKernel:
    """A compiled kernel for one key, bound to the (N, K) its launches pass (N and K are run-time arguments of
    the kernel: one compile serves every shape). ``origin``: "compiled" here, or "disk" (loaded from the host
    cache)."""

    key: object
    fn: object
    seconds: float
    ptx: str
    ab_stage: int
    origin: str = "compiled"
    launches: int = field(default=0, compare=False)
    N: int = 0
    K: int = 0
    _views: dict = field(default_factory=dict, compare=False, repr=False)
    #: The DSL's marshalled launch arguments of recent launches (:meth:`_invoke`), shared by every bound view.
    _marshalled: OrderedDict = field(default_factory=OrderedDict, compare=False, repr=False)

    def bound(self, N: int, K: int):
        """This kernel for launches of shape (N, K): a view sharing the compiled function, one per shape (the
        same object for every request of that shape, with its own launch count)."""
        shape = (int(N), int(K))
        view = self._views.get(shape)
        if view is None:
            view = self._views.setdefault(shape, dataclasses.replace(self, N=shape[0], K=shape[1], launches=0,
                                                                     _views={}))
        return view

    def _invoke(self, args: tuple) -> None:
        """``fn(*args)``: the launch. The DSL's ``__call__`` marshals every argument into C pointers
        (``generate_execution_args``, ~5 us for the GEMM's 7 arguments on 2 CPU cores, more with a pointer per
        peer) and then runs the program (``run_compiled_program``); a launch whose argument objects are the same
        objects as a recent one's -- :func:`_ptr`, :func:`_i32` and :func:`launch_stream` hand out one object per
        value -- reuses that marshalling. An entry keeps its argument objects (so no id in a key is reused while
        the entry lives) and the DSL's adapted objects (the stream's C pointer is an address inside the
        ``CUstream`` object) alive; the oldest of :data:`MARSHALLED_CACHE` entries is dropped first."""
        key = tuple(map(id, args))
        entry = self._marshalled.get(key)
        if entry is None:
            exe_args, adapted = self.fn.generate_execution_args(*args)
            entry = self._marshalled[key] = (args, exe_args, adapted)
            if len(self._marshalled) > MARSHALLED_CACHE:
                with contextlib.suppress(KeyError):  # another thread's launch emptied it meanwhile
                    self._marshalled.popitem(last=False)
        else:
            with contextlib.suppress(KeyError):  # dropped by another thread's launch: ``entry``, held here, is whole
                self._marshalled.move_to_end(key)
        self.fn.run_compiled_program(entry[1])


class CompiledGemm(CompiledKernel):
    """``launch(x, w, y, M, stream)`` computes ``y[:M] = x[:M] @ w.T``."""

    def launch(self, x_ptr: int, w_ptr: int, y_ptr: int, M: int, stream) -> None:
        """Queue one GEMM on ``stream`` (a ``cuda.bindings.driver.CUstream``). No host sync.

        Pointers are raw device addresses (16-byte aligned, checked by the caller)."""
        self._invoke(_gemm_args(x_ptr, w_ptr, y_ptr, M, self.N, self.K, stream))
        self.launches += 1


class CompiledGemmRs(CompiledKernel):
    """``launch(x, w, out, partial_ptrs, flag_ptrs, M, slots, slot_rows, rank, stream, split=None)``: one fused
    call of rank ``rank`` (``partial_ptrs`` / ``flag_ptrs``: every rank's partial region and flag area;
    ``slot_rows``: rows of one inbox slot of the push protocol, S_max). A split-K build (``config.split_k``) also
    takes ``split = (parts_ptr, part_flags_ptr, P)``: this rank's local fp32 parts buffer, its part ready words and
    the K parts of this call; any other build refuses one."""

    def launch(self, x_ptr: int, w_ptr: int, out_ptr: int, partial_ptrs, flag_ptrs, M: int, slots: int,
               slot_rows: int, rank: int, stream, split=None) -> None:
        if (split is not None) != self.key.config.split_k:
            raise ValueError("a split-K build takes split=(parts_ptr, part_flags_ptr, P), any other build none")
        self._invoke(_rs_args(self.key.protocol, x_ptr, w_ptr, out_ptr, partial_ptrs, flag_ptrs, M, self.N,
                              self.K, slots, slot_rows, rank, stream, split))
        self.launches += 1


# --- launch arguments (the same builder serves the compile, with placeholder pointers) -------------------
#: The launch arguments' DSL objects, kept by value (26th session): building them was the bulk of a launch's own
#: host time -- ``make_ptr`` ~2.3 us and ``Int32`` ~1 us each, 9 us per W = 1 GEMM call, 24 / 48 us per pull call
#: at W = 2 / 8 (one pointer per peer partial and flag area; CPU, 2 cores) -- while a call's values repeat: the
#: peers' pointers, N, K, the rank and the slots are fixed per instance, w is the same weight, x and out come back
#: from the caching allocator at the same addresses, M repeats. A pointer object stands for its address and
#: nothing else (the same address gives an equal argument), so a cached one is what a new one would be.
ARG_CACHE = 4096


def _new_ptr(dtype, address: int):
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=16)


def _new_i32(value: int):
    import cutlass

    return cutlass.Int32(value)


def _new_stream(handle: int):
    import cuda.bindings.driver as cuda

    return cuda.CUstream(handle)


#: Launches' builders; the compile's are the uncached ones (a traced argument never becomes a launch's).
_ptr = lru_cache(maxsize=ARG_CACHE)(_new_ptr)
_i32 = lru_cache(maxsize=ARG_CACHE)(_new_i32)
#: The ``CUstream`` argument of a launch on the stream with this raw handle (one object per handle, as
#: :func:`_ptr`'s, so that :meth:`CompiledKernel._invoke` finds the launch's marshalling again).
launch_stream = lru_cache(maxsize=ARG_CACHE)(_new_stream)
#: Marshalled launches a compiled kernel keeps (:meth:`CompiledKernel._invoke`): a workload's distinct (x, out,
#: M, stream) tuples of the caching allocator's addresses.
MARSHALLED_CACHE = 1024


def _gemm_args(x_ptr, w_ptr, y_ptr, M, N, K, stream, *, fresh: bool = False) -> tuple:
    """The GEMM's kernel arguments; ``fresh``: new objects (the compile), else the cached ones (launches)."""
    import cutlass

    ptr, i32 = (_new_ptr, _new_i32) if fresh else (_ptr, _i32)
    bf16 = cutlass.BFloat16
    return (ptr(bf16, x_ptr), ptr(bf16, w_ptr), ptr(bf16, y_ptr), i32(M), i32(N), i32(K), stream)


def _rs_args(protocol, x_ptr, w_ptr, out_ptr, partial_ptrs, flag_ptrs, M, N, K, slots, slot_rows, rank,
             stream, split=None, *, fresh: bool = False) -> tuple:
    """The kernel arguments of either protocol (their ``__call__`` signatures); ``split``: a split-K build's
    ``(parts_ptr, part_flags_ptr, P)``, after the peer pointers; ``fresh`` as :func:`_gemm_args`'s."""
    import cutlass

    ptr, i32 = (_new_ptr, _new_i32) if fresh else (_ptr, _i32)
    bf16 = cutlass.BFloat16
    head = (ptr(bf16, x_ptr), ptr(bf16, w_ptr), ptr(bf16, out_ptr))
    peers = tuple(ptr(bf16, p) for p in partial_ptrs) + tuple(ptr(cutlass.Int32, p) for p in flag_ptrs)
    if split is not None:
        peers += (ptr(cutlass.Float32, split[0]), ptr(cutlass.Int32, split[1]))
    if protocol == "pull":
        return head + (ptr(bf16, partial_ptrs[rank]), i32(M), i32(N), i32(K), i32(slots), i32(rank),
                       i32(1 if split is None else split[2]), stream) + peers
    return head + (i32(M), i32(N), i32(K), i32(slot_rows), i32(slots), i32(rank), stream) + peers


_PLACEHOLDER = 1 << 20  # a 16-byte aligned address for the compile (never dereferenced)


# --- the in-process cache ------------------------------------------------------------------------------
_LOCK = threading.Lock()
_CACHE: dict = {}
_MISSES = 0
_HITS = 0


def get_compiled(N: int, K: int, config: GemmConfig | None = None, arch: str = DEFAULT_ARCH) -> CompiledGemm:
    """The compiled GEMM for (config, arch), bound to (N, K): compiled on first request, then served from
    cache for every shape."""
    config = config or GemmConfig()
    config.check_shape(N, K)
    return _cached(CompileKey(config, arch), _compile_gemm).bound(N, K)


def get_compiled_rs(N: int, K: int, config: GemmConfig | None, world_size: int, rank: int | None = None,
                    arch: str = DEFAULT_ARCH, spin_timeout_s: float = SPIN_TIMEOUT_S, faults=(),
                    protocol: str = DEFAULT_PROTOCOL, order: str | None = None,
                    experiment: str = "") -> CompiledGemmRs:
    """The compiled fused GEMM + reduce-scatter for this key (compiled on first request), for every rank.

    ``rank`` (optional) is only validated: the rank is a launch argument. ``faults``: names of planted bugs
    of ``protocol`` (:data:`kernel.fused.config.KERNEL_FAULTS`), part of the key; unknown names, or names of
    the other protocol, raise ``ValueError``. Empty (the default) is the real kernel. Push only: ``order``
    (:data:`kernel.fused.config.PUSH_ORDERS`, default the first) and ``experiment`` (a measurement-only
    build, :data:`kernel.fused.config.KERNEL_EXPERIMENTS`), both part of the key."""
    check_protocol(protocol, kernel=True)
    if rank is not None and not 0 <= int(rank) < int(world_size):
        raise ValueError(f"rank {rank} outside 0..{int(world_size) - 1}")
    if protocol == "push":
        order = PUSH_ORDERS[0] if order is None else order
        check_push_build(order, experiment)
        if experiment and experiment not in KERNEL_EXPERIMENTS:
            raise ValueError(f"push experiment {experiment!r} is not a kernel build (the wrapper's)")
    elif order or experiment:
        raise ValueError("order and experiment are push-protocol builds")
    config = config or GemmConfig()
    config.check_shape(N, K)
    key = RsCompileKey(config, int(world_size), arch, float(spin_timeout_s), normalize_faults(faults, protocol),
                       protocol, order or "", experiment)
    return _cached(key, _compile_rs).bound(N, K)


def _cached(key, compile_fn):
    """One compile per key, whatever the thread (and, with the disk cache, the process); hits and misses
    counted for ``compile_stats``."""
    global _MISSES, _HITS
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _HITS += 1
            return hit
        _MISSES += 1
        compiled = _from_disk_or_compile(key, compile_fn)
        _CACHE[key] = compiled
        return compiled


def _kernel_of(key):
    if isinstance(key, CompileKey):
        return HopperGemmBF16(None, None, key.config)
    common = dict(spin_timeout_s=key.spin_timeout_s, faults=key.faults)
    if key.protocol == "pull":
        from .gemm_rs import HopperGemmRsBF16

        return HopperGemmRsBF16(None, None, key.config, key.world_size, **common)
    from .gemm_rs_push import HopperGemmRsPushBF16

    return HopperGemmRsPushBF16(None, None, key.config, key.world_size, order=key.order or PUSH_ORDERS[0],
                                experiment=key.experiment, **common)


def _compile_gemm(key: CompileKey) -> CompiledGemm:
    kern = _kernel_of(key)
    args = _gemm_args(_PLACEHOLDER, _PLACEHOLDER, _PLACEHOLDER, 1, 64, 64, _new_stream(0), fresh=True)
    fn, seconds, ptx = _compile_keeping_ptx(kern, args, key.arch)
    return CompiledGemm(key=key, fn=fn, seconds=seconds, ptx=ptx, ab_stage=kern.ab_stage)


def _compile_rs(key: RsCompileKey) -> CompiledGemmRs:
    kern = _kernel_of(key)
    W = key.world_size
    split = (_PLACEHOLDER, _PLACEHOLDER, 2) if key.config.split_k else None
    args = _rs_args(key.protocol, _PLACEHOLDER, _PLACEHOLDER, _PLACEHOLDER, [_PLACEHOLDER] * W, [_PLACEHOLDER] * W,
                    1, 64, 64, 1, 1, 0, _new_stream(0), split, fresh=True)
    fn, seconds, ptx = _compile_keeping_ptx(kern, args, key.arch)
    return CompiledGemmRs(key=key, fn=fn, seconds=seconds, ptx=ptx, ab_stage=kern.ab_stage)


def _compile_keeping_ptx(kernel, args: tuple, arch: str):
    """``cute.compile`` for ``arch`` (no GPU needed), timed, with its PTX kept: (fn, seconds, ptx)."""
    import cutlass.cute as cute

    dump_dir = tempfile.mkdtemp(prefix="fused_gemm_ptx_")
    try:
        t0 = time.perf_counter()
        fn = cute.compile(kernel, *args, options=f"--gpu-arch {arch} --keep-ptx --dump-dir {dump_dir}")
        seconds = time.perf_counter() - t0
        ptx = _read_ptx(fn)
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)
    return fn, seconds, ptx


def _read_ptx(fn) -> str:
    """CuTe DSL 4.8.1 keeps the PTX in ``fn.__ptx__``: the text, or (if the dump failed) its path."""
    ptx = getattr(fn, "__ptx__", None) or ""
    if ptx and not ptx.lstrip().startswith("//") and os.path.isfile(ptx):
        with open(ptx) as f:
            ptx = f.read()
    return ptx


# --- the host-wide cache (opt-in) ----------------------------------------------------------------------
def kernel_cache_dir() -> str | None:
    """The host-wide kernel cache directory (``GEMM_RS_KERNEL_CACHE_DIR``), or None when it is off
    (unset, empty or ``none``). The gate turns it on for its GPU rank pools by default
    (:func:`fuzz.topology.rank_env`); a library user opts in."""
    value = os.environ.get(KERNEL_CACHE_ENV, "")
    return None if value.lower() in ("", "none", "off") else value


def cutlass_dsl_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def key_digest(key) -> str:
    """What a disk entry is valid for: the key (canonical text), the DSL version, the kernels' source."""
    fields = dataclasses.asdict(key)
    fields["config"] = dataclasses.astuple(key.config)
    if "faults" in fields:
        fields["faults"] = sorted(fields["faults"])
    h = hashlib.sha256(f"{type(key).__name__} {sorted(fields.items())} dsl={cutlass_dsl_version()}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _KERNEL_SOURCES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:32]


def _from_disk_or_compile(key, compile_fn):
    root = kernel_cache_dir()
    if root is None:
        return compile_fn(key)
    os.makedirs(root, exist_ok=True)
    digest = key_digest(key)
    entry = os.path.join(root, digest)
    with open(os.path.join(root, f"{digest}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compile per key and host; the others wait, then load
        if os.path.isfile(os.path.join(entry, "kernel.o")):
            return _load_entry(key, entry)
        compiled = compile_fn(key)
        _store_entry(compiled, entry)
        return compiled


def _store_entry(compiled, entry: str) -> None:
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(entry))
    try:
        compiled.fn.export_to_c(tmp, "kernel", function_prefix=_prefix(entry))
        with open(os.path.join(tmp, "kernel.ptx"), "w") as f:
            f.write(compiled.ptx)
        with open(os.path.join(tmp, "key.txt"), "w") as f:
            f.write(f"{compiled.key!r}\nab_stage={compiled.ab_stage}\n")
        os.rename(tmp, entry)
    except Exception as exc:  # noqa: BLE001 -- the kernel works from memory; say that the cache did not
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"[kernel cache] could not store {compiled.key!r} in {entry}: {exc}", file=sys.stderr)


def _load_entry(key, entry: str):
    import cutlass.cute as cute

    t0 = time.perf_counter()
    fn = cute.runtime.load_module(os.path.join(entry, "kernel.o"))[_prefix(entry)]
    with open(os.path.join(entry, "kernel.ptx")) as f:
        ptx = f.read()
    cls = CompiledGemm if isinstance(key, CompileKey) else CompiledGemmRs
    return cls(key=key, fn=fn, seconds=time.perf_counter() - t0, ptx=ptx, ab_stage=_kernel_of(key).ab_stage,
               origin="disk")


def _prefix(entry: str) -> str:
    return "gemmrs_" + os.path.basename(entry)[:16]


def compile_stats() -> dict:
    """Compile (or load) seconds per configuration, plus cache hits and misses."""
    with _LOCK:
        return {
            "hits": _HITS,
            "misses": _MISSES,
            "configs": {
                (k.config, k.arch): {"seconds": v.seconds, "ab_stage": v.ab_stage, "origin": v.origin}
                for k, v in _CACHE.items()
                if isinstance(k, CompileKey)
            },
        }


__all__ = [
    "KERNEL_CACHE_ENV",
    "CompileKey",
    "CompiledGemm",
    "CompiledGemmRs",
    "CompiledKernel",
    "RsCompileKey",
    "compile_stats",
    "get_compiled",
    "get_compiled_rs",
    "kernel_cache_dir",
    "key_digest",
]
