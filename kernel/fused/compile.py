"""Compile cache of the Hopper kernels, reused for every M: the GEMM (one per (N, K, config, arch)) and
the fused GEMM + reduce-scatter (one per (N, K, config, W, rank, arch), :func:`get_compiled_rs`).

M is a run-time ``Int32`` of the kernel (see :mod:`kernel.fused.gemm`), so the cache key has no M.
Compilation needs no GPU: the target is named explicitly (``--gpu-arch sm_90a``), so it also runs on
a CPU-only CI machine. Each compile keeps its PTX (``--keep-ptx`` into a temporary directory, read
back into memory, directory removed) for tests that inspect the instructions.

Not re-entrant across processes; inside a process a lock serialises compiles.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field

from .gemm import GemmConfig, HopperGemmBF16

DEFAULT_ARCH = "sm_90a"


@dataclass(frozen=True)
class CompileKey:
    N: int
    K: int
    config: GemmConfig
    arch: str = DEFAULT_ARCH


@dataclass
class CompiledGemm:
    """A compiled kernel for one key: ``launch(x, w, y, M, stream)`` computes ``y[:M] = x[:M] @ w.T``."""

    key: CompileKey
    fn: object
    seconds: float
    ptx: str
    ab_stage: int
    launches: int = field(default=0, compare=False)

    def launch(self, x_ptr: int, w_ptr: int, y_ptr: int, M: int, stream) -> None:
        """Queue one GEMM on ``stream`` (a ``cuda.bindings.driver.CUstream``). No host sync.

        Pointers are raw device addresses (16-byte aligned, checked by the caller)."""
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import make_ptr

        gmem = cute.AddressSpace.gmem
        self.fn(
            make_ptr(cutlass.BFloat16, x_ptr, gmem, assumed_align=16),
            make_ptr(cutlass.BFloat16, w_ptr, gmem, assumed_align=16),
            make_ptr(cutlass.BFloat16, y_ptr, gmem, assumed_align=16),
            cutlass.Int32(M),
            stream,
        )
        self.launches += 1


_LOCK = threading.Lock()
_CACHE: dict[CompileKey, CompiledGemm] = {}
_MISSES = 0
_HITS = 0


def get_compiled(N: int, K: int, config: GemmConfig | None = None, arch: str = DEFAULT_ARCH) -> CompiledGemm:
    """The compiled kernel for (N, K, config, arch): compiled on first request, then served from cache."""
    return _cached(_CACHE, CompileKey(int(N), int(K), config or GemmConfig(), arch), _compile)


def _cached(cache: dict, key, compile_fn):
    """One compile per key, whatever the thread; hits and misses counted for ``compile_stats``."""
    global _MISSES, _HITS
    with _LOCK:
        hit = cache.get(key)
        if hit is not None:
            _HITS += 1
            return hit
        _MISSES += 1
        compiled = compile_fn(key)
        cache[key] = compiled
        return compiled


def _compile(key: CompileKey) -> CompiledGemm:
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    gemm = HopperGemmBF16(key.N, key.K, key.config)
    gmem = cute.AddressSpace.gmem

    def dummy_ptr():
        return make_ptr(cutlass.BFloat16, 1 << 20, gmem, assumed_align=16)

    args = (dummy_ptr(), dummy_ptr(), dummy_ptr(), cutlass.Int32(1), cuda.CUstream(0))
    fn, seconds, ptx = _compile_keeping_ptx(gemm, args, key.arch)
    return CompiledGemm(key=key, fn=fn, seconds=seconds, ptx=ptx, ab_stage=gemm.ab_stage)


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


@dataclass(frozen=True)
class RsCompileKey:
    N: int
    K: int
    config: GemmConfig
    world_size: int
    rank: int
    arch: str = DEFAULT_ARCH
    spin_timeout_s: float = 60.0
    faults: frozenset = frozenset()  # fault-injected build (kernel.fused.wrapper.KERNEL_FAULTS); empty: real


@dataclass
class CompiledGemmRs:
    """``launch(x, w, out, partial_ptrs, flag_ptrs, M, slots, stream)``: one fused GEMM-RS call."""

    key: RsCompileKey
    fn: object
    seconds: float
    ptx: str
    ab_stage: int
    launches: int = field(default=0, compare=False)

    def launch(self, x_ptr: int, w_ptr: int, out_ptr: int, partial_ptrs, flag_ptrs, M: int, slots: int,
               stream) -> None:
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import make_ptr

        gmem = cute.AddressSpace.gmem
        bf16 = cutlass.BFloat16
        self.fn(
            make_ptr(bf16, x_ptr, gmem, assumed_align=16),
            make_ptr(bf16, w_ptr, gmem, assumed_align=16),
            make_ptr(bf16, out_ptr, gmem, assumed_align=16),
            [make_ptr(bf16, p, gmem, assumed_align=16) for p in partial_ptrs],
            [make_ptr(cutlass.Int32, p, gmem, assumed_align=16) for p in flag_ptrs],
            cutlass.Int32(M),
            cutlass.Int32(slots),
            stream,
        )
        self.launches += 1


_RS_CACHE: dict[RsCompileKey, CompiledGemmRs] = {}


def get_compiled_rs(N: int, K: int, config: GemmConfig | None, world_size: int, rank: int,
                    arch: str = DEFAULT_ARCH, spin_timeout_s: float = 60.0, faults=()) -> CompiledGemmRs:
    """The compiled fused GEMM + reduce-scatter for this key (compiled on first request).

    ``faults``: names of planted bugs (:data:`kernel.fused.wrapper.KERNEL_FAULTS`), part of the key;
    unknown names raise ``ValueError``. Empty (the default) is the real kernel."""
    from .wrapper import normalize_faults

    key = RsCompileKey(int(N), int(K), config or GemmConfig(), int(world_size), int(rank), arch,
                       float(spin_timeout_s), normalize_faults(faults))
    return _cached(_RS_CACHE, key, _compile_rs)


def _compile_rs(key: RsCompileKey) -> CompiledGemmRs:
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    from .gemm_rs import HopperGemmRsBF16

    kern = HopperGemmRsBF16(key.N, key.K, key.config, key.world_size, key.rank, key.spin_timeout_s,
                            faults=key.faults)
    gmem = cute.AddressSpace.gmem

    def dummy(dtype):
        return make_ptr(dtype, 1 << 20, gmem, assumed_align=16)

    W = key.world_size
    args = (
        dummy(cutlass.BFloat16),
        dummy(cutlass.BFloat16),
        dummy(cutlass.BFloat16),
        [dummy(cutlass.BFloat16) for _ in range(W)],
        [dummy(cutlass.Int32) for _ in range(W)],
        cutlass.Int32(1),
        cutlass.Int32(1),
        cuda.CUstream(0),
    )
    fn, seconds, ptx = _compile_keeping_ptx(kern, args, key.arch)
    return CompiledGemmRs(key=key, fn=fn, seconds=seconds, ptx=ptx, ab_stage=kern.ab_stage)


def ptx_text(N: int, K: int, config: GemmConfig | None = None, arch: str = DEFAULT_ARCH) -> str:
    """PTX of the compiled kernel for this key (compiles it if needed)."""
    return get_compiled(N, K, config, arch).ptx


def compile_stats() -> dict:
    """Compile seconds per configuration, plus cache hits and misses."""
    with _LOCK:
        return {
            "hits": _HITS,
            "misses": _MISSES,
            "configs": {
                (k.N, k.K, k.config, k.arch): {"seconds": v.seconds, "ab_stage": v.ab_stage}
                for k, v in _CACHE.items()
            },
        }


def clear_cache() -> None:
    """Forget every compiled kernel and the counters (tests)."""
    global _MISSES, _HITS
    with _LOCK:
        _CACHE.clear()
        _RS_CACHE.clear()
        _MISSES = _HITS = 0
