"""A kernel with a shared-memory race, on purpose: the canary that lets a filtered racecheck run read CLEAN.

``python -m fuzz.sanitize --tool racecheck --only-ours`` instruments only the CuTe DSL kernels (compute-sanitizer
``--kernel-name kns=`` :data:`OURS`): cuBLAS's GEMMs of the oracle and the truth, most of a racecheck run's time,
run uninstrumented. A filter that matched nothing would read CLEAN however racy our kernels were, so before the
pool the same compute-sanitizer command runs this module: one CTA of :data:`THREADS` threads, each writes its own
shared-memory word and reads the word another warp writes, with no barrier between (a read-after-write hazard
racecheck must report). The verdict needs that hazard in this module's log, named by this kernel; its entry name
starts with :data:`OURS` as every kernel of ``kernel/fused`` does (pinned on the CPU by
``tests/kernel/test_fused_compile.py``).

    compute-sanitizer --tool racecheck --kernel-name kns=kernel_cutlass_ python -m fuzz.race_canary
"""

import sys

#: The entry-name prefix CuTe DSL 4.8.1 gives every kernel (``kernel_cutlass_<function>_<module><class>...``):
#: the substring of the filtered racecheck run (``--kernel-name kns=``).
OURS = "kernel_cutlass_"
#: The substring of this canary's own entry name (function ``race_canary`` of module ``fuzz.race_canary``).
CANARY = "race_canary"
THREADS = 128
#: How far away the word a thread reads lies: another warp's (racecheck reports hazards across warps).
DISTANCE = 32


def _kernels():
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.memory import SmemAllocator

    @cute.kernel
    def race_canary(out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        smem = SmemAllocator()
        words = smem.allocate_tensor(cutlass.Int32, cute.make_layout(THREADS), 16)
        words[tidx] = tidx
        # the race: no barrier between another warp's write of this word and this read
        out[tidx] = words[(tidx + DISTANCE) % THREADS]

    @cute.jit
    def launch(out_ptr: cute.Pointer, stream: cuda.CUstream):
        out = cute.make_tensor(out_ptr, cute.make_layout(THREADS))
        race_canary(out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def compile_canary(arch: str = "sm_90a", address: int = 1 << 20):
    """The canary compiled for ``arch`` (no GPU needed): ``(fn, seconds, ptx)``."""
    import cuda.bindings.driver as cuda
    import cutlass

    from kernel.fused.compile import _compile_keeping_ptx, _ptr

    return _compile_keeping_ptx(_kernels(), (_ptr(cutlass.Int32, address), cuda.CUstream(0)), arch)


def main() -> int:
    import cuda.bindings.driver as cuda
    import cutlass
    import torch

    from kernel.fused.compile import _ptr

    out = torch.full((THREADS,), -1, dtype=torch.int32, device="cuda")
    fn, _, _ = compile_canary(address=out.data_ptr())
    stream = torch.cuda.current_stream()
    fn(_ptr(cutlass.Int32, out.data_ptr()), cuda.CUstream(stream.cuda_stream))
    torch.cuda.synchronize()
    print(f"race canary ran: {THREADS} threads, read {int((out >= 0).sum())} words written by other warps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
