"""Memory an implementation keeps (CONTRACT.md, "Instances").

``memory_bounded`` — calls keep no memory: once an instance has made one call at its
largest M, calls at other M values (and the same M again) leave no more live tensor memory behind than there was
before them, results dropped. A workspace or plan buffer cached per distinct M, or every result kept "for
debugging", grows with each new batch size an engine sees -- results stay right, the process runs out of memory
hours later; no value check sees it.

``released_on_close`` — ``close()`` lets go of the instance's memory: once it returned and the caller dropped the
instance, no tensor that owned the instance's state (its ``state_tensors()`` and red zones, a view's base) is still
alive -- a module-level registry of workspaces, a class-level buffer pool, a kernel cache that captured the
workspace keep it, and an engine that rebuilds its layers runs out of memory. Weak references, so the check itself
keeps nothing alive; an instance that declares no state tensors has nothing to watch: skipped, never passed.

What ``memory_bounded`` counts: every tensor the garbage collector can reach (:func:`live_tensors`, after a full
collection), each storage once (views add nothing), on any device. Memory that only a library's C++ side holds (a CUDA
allocator block with no Python tensor, symmetric memory a C++ object keeps) is not visible here.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from dataclasses import dataclass

import torch

from .result import CheckResult, skipped

#: Live tensor bytes a probe may gain: none (a result held "as the last one" is replaced, not added to).
SLACK_BYTES = 0


@dataclass(frozen=True)
class LiveTensor:
    storage: tuple          # (device, storage data pointer): one entry per storage, views share it
    nbytes: int             # the storage's bytes
    what: str               # shape, dtype, device of the tensor


def live_tensors() -> dict[int, LiveTensor]:
    """id -> :class:`LiveTensor` of every tensor object the garbage collector tracks, after a full collection."""
    gc.collect()
    out: dict[int, LiveTensor] = {}
    with warnings.catch_warnings():  # isinstance() on a deprecated torch object (torch.distributed.reduce_op) warns
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        try:
            storage = obj.untyped_storage()
            key, nbytes = (str(obj.device), storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse, meta, or otherwise storage-less
            continue
        out[id(obj)] = LiveTensor(key, nbytes, f"{tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')} "
                                               f"{obj.device}")
    return out


def storage_bytes(tensors: dict[int, LiveTensor]) -> int:
    """Bytes of the distinct storages of ``tensors``."""
    return sum({t.storage: t.nbytes for t in tensors.values()}.values())


def memory_bounded(before: dict[int, LiveTensor], after: dict[int, LiveTensor], *, during: str, rank=None,
                   name: str = "memory_bounded", slack_bytes: int = SLACK_BYTES,
                   device_grown: int | None = None) -> CheckResult:
    """The live tensor memory of ``after`` exceeds that of ``before`` by at most ``slack_bytes``; a failure names
    the tensors alive after that were not before (their storages new). ``during``: the calls in between.
    ``device_grown`` (CUDA; None elsewhere): what the caching allocator handed out more over the same calls
    (``torch.cuda.memory_allocated``) -- blocks held where no Python tensor is (a C++-side or extension cache), held
    to the same slack. (Measured 0 in every probe of the fused and unfused gates, 2026-12-03 and 2026-12-06.)"""
    bytes_before, bytes_after = storage_bytes(before), storage_bytes(after)
    grown = bytes_after - bytes_before
    old = {t.storage for t in before.values()}
    new = {}
    for t in after.values():
        if t.storage not in old:
            new.setdefault(t.storage, t)
    extra = {"bytes_before": bytes_before, "bytes_after": bytes_after, "grown": grown,
             "new_tensors": len(new)}
    if device_grown is not None:
        extra["device_bytes_grown"] = device_grown
    if grown > slack_bytes:
        listed = sorted(new.values(), key=lambda t: -t.nbytes)
        shown = ", ".join(f"{t.what} ({t.nbytes} B)" for t in listed[:6]) + (" ..." if len(listed) > 6 else "")
        return CheckResult(name=name, passed=False, rank=rank, total=len(after), n_wrong=len(new), extra=extra,
                           detail=f"{grown} bytes more live tensor memory after {during} than before it (results "
                                  f"dropped; {slack_bytes} allowed), {len(new)} new storage(s): {shown or '-'}: "
                                  "the implementation keeps memory per call or per M")
    if device_grown is not None and device_grown > slack_bytes:
        return CheckResult(name=name, passed=False, rank=rank, total=len(after), n_wrong=1, extra=extra,
                           detail=f"the CUDA caching allocator handed out {device_grown} bytes more after {during} "
                                  f"than before it (results dropped; {slack_bytes} allowed), while live Python "
                                  f"tensors grew {grown:+d} bytes: memory kept per call or per M where no Python "
                                  "tensor holds it (a C++-side or extension cache)")
    device = "" if device_grown is None else f", device allocator {device_grown:+d} bytes"
    return CheckResult(name=name, passed=True, rank=rank, total=len(after), extra=extra,
                       detail=f"live tensor memory {grown:+d} bytes{device} after {during}")


def watch_release(tensors: dict[str, torch.Tensor]) -> dict[str, weakref.ref]:
    """label -> a weak reference to the tensor owning each of ``tensors``' memory (a view's base, else itself)."""
    return {label: weakref.ref(t._base if t._base is not None else t) for label, t in tensors.items()}


def released_on_close(watched: dict[str, weakref.ref], *, what: str, rank=None,
                      name: str = "released_on_close") -> CheckResult:
    """Every tensor of ``watched`` (:func:`watch_release`, taken before the close) is gone after a full collection.
    ``what``: the instance, for the message."""
    if not watched:
        return skipped(name, f"{what} declares no state tensors: nothing to watch", rank=rank)
    gc.collect()
    alive = [label for label, ref in watched.items() if ref() is not None]
    if alive:
        return CheckResult(name=name, passed=False, rank=rank, total=len(watched), n_wrong=len(alive),
                           extra={"alive": alive},
                           detail=f"{len(alive)} of {len(watched)} state tensors of {what} still alive after close() "
                                  f"and the caller dropped the instance: {', '.join(alive[:6])}"
                                  f"{' ...' if len(alive) > 6 else ''} -- something outside the instance keeps them")
    return CheckResult(name=name, passed=True, rank=rank, total=len(watched),
                       detail=f"the {len(watched)} state tensors of {what} went with close()")
