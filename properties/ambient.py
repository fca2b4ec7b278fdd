"""``ambient_state_kept``: a call leaves the caller's process as it found it, as any torch op does.

A layer calls the implementation in the middle of a model: the current CUDA device and stream, grad mode, the
default dtype, the math flags that decide other layers' numerics (TF32, reduced-precision reductions, deterministic
algorithms, flush-to-zero), autocast and the random generators are the caller's. A wrapper that sets one and does not
put it back -- ``torch.cuda.set_device`` before a launch, ``torch.cuda.set_stream(comm)`` left current,
``torch.set_grad_enabled(False)`` instead of ``torch.no_grad()``, ``torch.set_float32_matmul_precision("high")``
for its fallback's speed, a debug poison drawn with ``torch.rand`` -- returns the right values and breaks the model
around it: the next layer runs on another stream, trains without gradients, in TF32, or draws other dropout masks.
No value check sees that, so :func:`ambient_snapshot` is taken right before and right after each eager call (host
reads only: no sync, no allocation on the device) and :func:`ambient_state_kept` lists what a call changed.

What is read (:data:`AMBIENT_ITEMS`, each a name and a query; a query that torch lacks reads as ``"n/a"``): the
default dtype and device, grad and inference mode, anomaly detection, deterministic algorithms (and warn-only), the
fp32 matmul precision, ``torch.backends.cuda.matmul``'s TF32, bf16 / fp16 reduced-precision reductions and fp16
accumulation, cuDNN's TF32, deterministic and benchmark flags, the attention backends, oneDNN (mkldnn) on or off,
autocast on CPU and CUDA, the intra-op thread count, whether the calling thread flushes
subnormals to zero (a probe: ``torch.set_flush_denormal`` has no getter), the CPU generator's state, and, where
CUDA is initialised, the current device, its current stream (and the implementation's device's, where that is
another device), and the implementation's device's generator state.
"""

from __future__ import annotations

import torch

from .result import CheckResult

_TINY = 2.0**-140  # subnormal in fp32: a thread that flushes subnormals to zero multiplies it to 0


def _flushes_subnormals() -> bool:
    # on the host whatever the default device (a snapshot may be taken inside the caller's torch.device context)
    return (torch.tensor([_TINY], dtype=torch.float32, device="cpu") * 1.0).item() == 0.0


def _cuda_index(device) -> int | None:
    """The CUDA device index of ``device`` (None for another type or where CUDA is not initialised: reading its
    state must not be what initialises it)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda":
        return None
    return torch.cuda.current_device() if device.index is None else device.index


def _generator_state(gen) -> bytes:
    return bytes(gen.get_state().numpy().tobytes())


def _set_generator_state(gen, state: bytes) -> None:
    gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))


def _set_matmul(attr: str):
    return lambda v: setattr(torch.backends.cuda.matmul, attr, v)


def _set_cudnn(v) -> None:
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = v


def _set_autocast(v) -> None:
    torch.set_autocast_enabled("cpu", v[0])
    torch.set_autocast_enabled("cuda", v[1])


def _set_sdp(v) -> None:
    cuda = torch.backends.cuda
    for enable, on in zip((cuda.enable_flash_sdp, cuda.enable_mem_efficient_sdp, cuda.enable_math_sdp,
                           cuda.enable_cudnn_sdp), v, strict=True):
        enable(on)


def _host_items() -> list[tuple[str, object, object]]:
    """(name, query, setter or None where the state cannot be set back from outside: inference mode is a
    context's)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return [
        ("default dtype", torch.get_default_dtype, torch.set_default_dtype),
        ("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
        ("inference mode", torch.is_inference_mode_enabled, None),
        ("deterministic algorithms", lambda: (torch.are_deterministic_algorithms_enabled(),
                                              torch.is_deterministic_algorithms_warn_only_enabled()),
         lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        ("fp32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        ("cuda matmul allow_tf32", lambda: matmul.allow_tf32, _set_matmul("allow_tf32")),
        ("cuda matmul bf16 reduced-precision reduction", lambda: matmul.allow_bf16_reduced_precision_reduction,
         _set_matmul("allow_bf16_reduced_precision_reduction")),
        ("cuda matmul fp16 reduced-precision reduction", lambda: matmul.allow_fp16_reduced_precision_reduction,
         _set_matmul("allow_fp16_reduced_precision_reduction")),
        ("cudnn allow_tf32 / deterministic / benchmark", lambda: (cudnn.allow_tf32, cudnn.deterministic,
                                                                  cudnn.benchmark), _set_cudnn),
        ("autocast (cpu, cuda)", lambda: (torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")),
         _set_autocast),
        ("default device", torch.get_default_device, torch.set_default_device),
        ("anomaly detection", lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
         lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1])),
        ("attention backends (flash, mem-efficient, math, cudnn)",
         lambda: (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
                  torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()), _set_sdp),
        ("cuda matmul fp16 accumulation", lambda: matmul.allow_fp16_accumulation,
         _set_matmul("allow_fp16_accumulation")),
        ("mkldnn enabled", lambda: torch.backends.mkldnn.enabled,
         lambda v: setattr(torch.backends.mkldnn, "enabled", v)),
        ("intra-op threads", torch.get_num_threads, torch.set_num_threads),
        ("flush subnormals to zero", _flushes_subnormals, torch.set_flush_denormal),
        ("CPU random generator state", lambda: _generator_state(torch.default_generator),
         lambda v: _set_generator_state(torch.default_generator, v)),
    ]


def _cuda_items(index: int) -> list[tuple[str, object, object]]:
    """The current device, its current stream and, where the implementation's device ``index`` is another one, that
    device's current stream too (read once where they are the same device, as the harness calls), and ``index``'s
    generator."""
    current = torch.cuda.current_device()
    streams = [("current stream of the current device", lambda: torch.cuda.current_stream(current),
                torch.cuda.set_stream)]
    if index != current:
        streams.append((f"current stream of cuda:{index}", lambda: torch.cuda.current_stream(index),
                        torch.cuda.set_stream))
    return [
        ("current CUDA device", lambda: current, torch.cuda.set_device),
        *streams,
        (f"random generator state of cuda:{index}", lambda: _generator_state(torch.cuda.default_generators[index]),
         lambda v: _set_generator_state(torch.cuda.default_generators[index], v)),
    ]


#: The names :func:`ambient_snapshot` reads on a host without CUDA (the CUDA ones join where it is initialised).
AMBIENT_ITEMS = tuple(name for name, _, _ in _host_items())


class AmbientSnapshot(dict):
    """name -> value read (``"n/a"`` where this torch lacks the query), and how to set each back."""

    def __init__(self, items):
        super().__init__()
        self.setters = {}
        for name, query, setter in items:
            try:
                self[name] = query()
            except (AttributeError, TypeError, RuntimeError):  # a torch without this query
                self[name] = "n/a"
            self.setters[name] = setter

    @property
    def unread(self) -> tuple[str, ...]:
        """The items this torch has no query for (read as ``"n/a"``): no call can fail on them."""
        return tuple(name for name, value in self.items() if isinstance(value, str) and value == "n/a")


def ambient_snapshot(device=None) -> AmbientSnapshot:
    """The caller's process state a call must leave as it found it (module docstring); ``device``: the
    implementation's device (its current stream and generator are read too, where it is a CUDA device)."""
    index = _cuda_index(device)
    return AmbientSnapshot(_host_items() + (_cuda_items(index) if index is not None else []))


def ambient_changes(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, one line each: ``name: before -> after`` (generator states, long byte
    strings, shown as changed; streams by their handles). Only what both read is compared: a call that initialises
    CUDA adds its items to the second, which is no change of the caller's."""
    out = []
    for name in before:
        if name not in after:  # read before only (another device's items): nothing to compare
            continue
        a, b = before[name], after[name]
        if a == b:
            continue
        if isinstance(a, bytes) and isinstance(b, bytes):
            out.append(f"{name}: changed (a random number was drawn from the caller's generator, or it was reseeded)")
        else:
            out.append(f"{name}: {_show(a)} -> {_show(b)}")
    return out


def ambient_restore(before: AmbientSnapshot, after: dict) -> list[str]:
    """Set back what a call changed (``before`` against ``after``), so the harness's own work after the call -- the
    oracle, the next call, the next case -- runs in the caller's state and a leak fails every call that makes it,
    not only a process's first. Returns the names that could not be set back."""
    stuck = []
    for name, value in before.items():
        if after.get(name, value) == value:
            continue
        setter = before.setters.get(name)
        try:
            if setter is None or value == "n/a":
                raise RuntimeError("no setter")
            setter(value)
        except (RuntimeError, TypeError, ValueError):
            stuck.append(name)
    return stuck


def ambient_since(before: AmbientSnapshot, device=None) -> list[str]:
    """What changed since ``before`` (:func:`ambient_changes` of a snapshot taken now), set back at once
    (:func:`ambient_restore`; what could not be is listed too): one call's leak, reported once and undone."""
    after = ambient_snapshot(device)
    changed = ambient_changes(before, after)
    if changed:
        changed += [f"{name}: could not be set back" for name in ambient_restore(before, after)]
    return changed


def _show(v) -> str:
    handle = getattr(v, "cuda_stream", None)
    if handle is not None:
        return f"stream 0x{handle:x}" if handle else "the default stream"
    return repr(v)


def ambient_state_kept(changed: list[tuple[str, list[str]]], *, rank=None, unread: tuple[str, ...] = (),
                       name: str = "ambient_state_kept") -> CheckResult:
    """``changed``: (call label, :func:`ambient_changes` of the snapshots around that call) for every call checked.
    Fails when any call changed anything, naming the calls and what each changed. ``unread``: items this torch has
    no query for (:attr:`AmbientSnapshot.unread`): they could not fail, and a pass says so."""
    n = len(changed)
    bad = [(label, what) for label, what in changed if what]
    extra = {"unread": list(unread)} if unread else {}
    if not bad:
        gap = f" (not read on this torch, so not checked: {', '.join(unread)})" if unread else ""
        return CheckResult(name=name, passed=True, rank=rank, total=n, extra=extra,
                           detail=f"{n} calls left the caller's device, stream, grad mode, math flags and random "
                                  f"generators as they found them{gap}")
    lines = "; ".join(f"{label}: {', '.join(what)}" for label, what in bad[:4])
    more = f" (and {len(bad) - 4} more calls)" if len(bad) > 4 else ""
    return CheckResult(name=name, passed=False, rank=rank, total=n, n_wrong=len(bad),
                       extra={"changed": [label for label, _ in bad], **extra},
                       detail=f"{len(bad)} of {n} calls changed the caller's process state ({lines}{more}): a call "
                              "must leave it as a torch op does -- set it inside a context manager that restores it, "
                              "or not at all")
