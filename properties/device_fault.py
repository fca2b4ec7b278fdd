"""A fault the GPU reported after the implementation's calls: an illegal address, a kernel's ``trap`` (the fused
kernel's spin timeout: a peer that never arrived), a launch failure.

Kernels run asynchronously, so such a fault surfaces at the next operation that waits for the device -- a check's
read-back or the case's final wait -- outside the implementation's call, where the rank's case used to end with an
escaped exception: a harness ERROR, "not a verdict". But the faulting kernel is the implementation's: the harness's
own device work is torch's operators on valid tensors, and the control of every kill matrix (the correct
implementation through the same cases) shows it raises none. So the fault is the implementation's failure: a failed
``device_fault`` check (22nd session, one H200: the wrapper mutant ``FusedGlobalRankAtLaunch``, whose kernels wait
for peers of the wrong group, reached the kernels' 60 s trap before the kill session's 90 s case deadline and stood as
a harness ERROR instead of a kill).

A device-side assert (``device-side assert triggered``) is not counted: torch's own kernels raise it (an index out
of range in the harness's ops), so it stays an error of the harness.
"""

from __future__ import annotations

import traceback

import torch

from .result import CheckResult

#: The check's name (fuzz/verdict.py treats it as ``call_raised``: the rank left the case mid-way).
DEVICE_FAULT = "device_fault"
#: CUDA's words for an error of torch's own device-side asserts (the harness's operators), never counted here. Not
#: "device-side assert" alone: torch's advice after every CUDA error ends "Compile with `TORCH_USE_CUDA_DSA` to
#: enable device-side assertions." (the first version matched that, and an H200 kept the trap an ERROR).
TORCH_ASSERT = "device-side assert triggered"


def is_device_fault(exc: BaseException) -> bool:
    """``exc`` is an error the GPU reported (torch's ``AcceleratorError``, or a ``RuntimeError`` carrying a CUDA
    error), not one of torch's device-side asserts."""
    accelerator = getattr(torch, "AcceleratorError", None)
    text = str(exc)
    from_device = (accelerator is not None and isinstance(exc, accelerator)) or \
        (isinstance(exc, RuntimeError) and "CUDA error" in text)
    return from_device and TORCH_ASSERT not in text


def device_fault(exc: BaseException, trail: str, *, rank=None) -> CheckResult:
    """The failed check for a GPU fault ``exc`` that surfaced after this rank's calls of the implementation
    (``trail``: the calls it began in the case, the kernel path of each)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return CheckResult(name=DEVICE_FAULT, passed=False, rank=rank,
                       detail=f"the GPU reported {type(exc).__name__}: {exc} -- after this rank's calls of the "
                              f"implementation, whose kernels are the case's only device code besides torch's own "
                              f"operators (an 'unspecified launch failure' after about a minute is the fused "
                              f"kernel's spin-timeout trap: a peer that never arrived)\n{trail}\n{tb}",
                       extra={"raised": type(exc).__name__, "message": str(exc)})
