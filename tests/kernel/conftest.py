"""Shared set-up of the kernel tests.

CuTe DSL reads ``CUTE_DSL_ARCH`` when ``cutlass`` is first imported; on a CPU-only machine it must say
sm_90a before that happens, so it is set here, before any test module of this folder imports cutlass.
(The compile cache also names the target explicitly, ``--gpu-arch sm_90a``.)

On a machine without a GPU the host-wide kernel cache (:mod:`kernel.fused.compile`,
``GEMM_RS_KERNEL_CACHE_DIR``) is on for the tests unless the caller set it: the xdist workers, and the plain
and ``PYTHONOPTIMIZE=1`` passes of CI, share each compile instead of repeating it. An entry is keyed by the
kernels' source and the DSL version, so a test never reads the PTX of other code; tests that need a fresh
compile call the compile functions directly (``_compile_rs``), which bypass every cache. On a GPU host it
stays as the caller set it (off by default), so the GPU tests run freshly compiled kernels; the kernel
cache's own GPU test turns it on where it needs it.

The modules that compile most (test_fault_builds.py: some 30 builds in one module fixture; test_fused_compile.py)
are one xdist unit of work, ``kernel-compile`` (by path: tests/scheduling.py; pytest 9 ignores xdist's marks): on two
workers both had needed the module fixture at once, one compiling and
the other waiting on the cache's lock for the same builds (95 s and 86 s of set-up on a 2-core CI machine, 15th
session); now one worker compiles them while the other runs the rest of the suite.
"""

import os
import sys
import tempfile

import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
if not torch.cuda.is_available():
    os.environ.setdefault("GEMM_RS_KERNEL_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), f"gemm-rs-kernel-cache-tests-{os.getuid()}"))

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
