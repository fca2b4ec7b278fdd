"""A kernel with a shared-memory race, on purpose: the canary without whose hazard a racecheck run never reads CLEAN.

``python -m fuzz.sanitize --tool racecheck`` first runs this module under the same compute-sanitizer command as the
ranks: one CTA of :data:`THREADS` threads, each writes its own shared-memory word and reads the word another warp
writes, with no barrier between (a hazard racecheck must report). A racecheck that reported nothing here -- a tool
that did not instrument CuTe DSL kernels, a version that misses such races, a command line that lost the tool --
would read CLEAN whatever our kernels did; the verdict needs the canary's hazard in its own log, named by this kernel
(and never counts it against the implementation).

    compute-sanitizer --tool racecheck python -m fuzz.race_canary
"""

import sys

#: The substring of this canary's entry name (CuTe DSL 4.8.1: ``kernel_cutlass_race_canary_<arguments>``).
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


def compile_canary(arch: str = "sm_90a"):
    """The canary compiled for ``arch`` (no GPU needed; a placeholder pointer, the output's comes at launch):
    ``(fn, seconds, ptx)``."""
    import cuda.bindings.driver as cuda
    import cutlass

    from kernel.fused.compile import _PLACEHOLDER, _compile_keeping_ptx, _ptr

    return _compile_keeping_ptx(_kernels(), (_ptr(cutlass.Int32, _PLACEHOLDER), cuda.CUstream(0)), arch)


def main() -> int:
    import cuda.bindings.driver as cuda
    import cutlass
    import torch

    from kernel.fused.compile import _ptr

    out = torch.full((THREADS,), -1, dtype=torch.int32, device="cuda")
    fn, _, _ = compile_canary()
    stream = torch.cuda.current_stream()
    fn(_ptr(cutlass.Int32, out.data_ptr()), cuda.CUstream(stream.cuda_stream))
    torch.cuda.synchronize()
    print(f"race canary ran: {THREADS} threads, read {int((out >= 0).sum())} words written by other warps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
