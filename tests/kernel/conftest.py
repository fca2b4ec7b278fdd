"""Shared set-up of the kernel tests.

CuTe DSL reads ``CUTE_DSL_ARCH`` when ``cutlass`` is first imported; on a CPU-only machine it must say
sm_90a before that happens, so it is set here, before any test module of this folder imports cutlass.
(The compile cache also names the target explicitly, ``--gpu-arch sm_90a``.)
"""

import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
