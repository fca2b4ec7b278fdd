"""What a call raises. A bad call is rejected with the expected error type and changes nothing: every
watched tensor (out, the inputs, workspaces, flags) keeps its bytes, and it runs no collective before it
raises (``rejected_cleanly``): a rank whose operand alone is bad would pair that collective with its peers'
next one, or hang them. An out-of-range M is rejected before any work at all is queued (``no_work``: the
contract's "before any GPU work is queued"). The ops a rejected call ran are seen through a
``TorchDispatchMode`` (aten and c10d ops; a kernel launched by other means is seen by what it wrote). Under
``python -O`` too — the check is a call and a comparison, not an ``assert``. A valid call raises nothing:
one that does is the implementation's failure (``call_raised``), with the exception's type, message and
traceback — not an error of the harness."""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .ambient import ambient_since, ambient_snapshot
from .result import CheckResult, read_back

#: Namespaces of collective ops (``dist.*`` and functional collectives go through them).
COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "_dtensor"})
#: aten ops that queue no work: an uninitialised allocation, metadata (views are recognised by their schema).
NO_WORK_OPS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "detach",
                         "alias", "lift_fresh", "is_contiguous", "sym_size", "sym_stride", "sym_numel",
                         "sym_storage_offset", "is_same_size"})


#: Ops whose schema marks a tensor written (``Tensor(a!)``) that change no byte of its data: the allocator's stream
#: bookkeeping (``record_stream``, which the contract asks of an implementation working on its own stream) and an
#: ``out=`` op's resize of its output. In-place view ops (``as_strided_``, ``t_``, ``set_``, ``resize_``: tagged
#: ``inplace_view``) change metadata only too.
METADATA_WRITES = frozenset({"record_stream", "_resize_output_"})


class OpsSeen(TorchDispatchMode):
    """The collectives and the work (any other op that is not a view or in :data:`NO_WORK_OPS`) run inside it, and
    what each op wrote: ``written`` -- (op, device, first byte, byte after the last) of every tensor an op's schema
    marks as written (``Tensor(a!)``: in-place, ``out=``), but for ops that write metadata only
    (:data:`METADATA_WRITES`, the in-place view ops)."""

    def __init__(self):
        super().__init__()
        self.collectives: list[str] = []
        self.work: list[str] = []
        self.written: list[tuple[str, torch.device, int, int]] = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch's hook: an implementation built with torch.compile runs its compiled code inside the mode (which sees
        # the ops that code dispatches), not an eager fallback -- the default for a mode, and a verdict on a path the
        # implementation does not take
        return True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch's hook: unwrapped, the dispatch method does not import torch._dynamo at its first call (1.5-2.7 s
        # in every new rank process); it never runs under torch.compile
        return False

    def ops(self) -> list[str]:
        """Every op seen (collectives and work), as overload packets (``aten.mm``, not ``aten.mm.out``)."""
        return [name.rsplit(".", 1)[0] for name in self.collectives + self.work]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in COLLECTIVE_NAMESPACES:
            self.collectives.append(str(func))
        elif not (func.is_view or (func.namespace == "aten" and func._opname in NO_WORK_OPS)):
            self.work.append(str(func))
        writes_data = torch.Tag.inplace_view not in func.tags and func._opname not in METADATA_WRITES
        for i, arg in enumerate(func._schema.arguments if writes_data else ()):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) else (kwargs or {}).get(arg.name)
                for t in value if isinstance(value, (list, tuple)) else (value,):
                    span = byte_span(t)
                    if span is not None:
                        self.written.append((str(func), t.device, *span))
        return func(*args, **(kwargs or {}))


def byte_span(t) -> tuple[int, int] | None:
    """(first byte, byte after the last) of the memory tensor ``t`` views (its strides' reach); None for no tensor,
    no elements or no storage to address."""
    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.device.type == "meta":
        return None
    try:
        start = t.data_ptr()
    except RuntimeError:  # no storage (a tensor subclass, a sparse layout)
        return None
    reach = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (reach + 1) * t.element_size()


def rejected_cleanly(call, expected: type[BaseException] | tuple, watched: dict[str, torch.Tensor], *, rank=None,
                     name="rejected_cleanly", no_work: bool = False, around=None) -> CheckResult:
    """Run ``call()``; pass iff it raises ``expected``, no tensor in ``watched`` changed, the caller's grad mode, math
    flags and CPU generator are as they were (``properties.ambient``; not around a capture), and, before it raised,
    it ran no collective (and, ``no_work``, no op that queues work). ``around()``: a context manager the call runs
    in whose own ops are not the call's (a CUDA-graph capture: its begin fills the generator's graph state)."""
    before = {k: v.detach().clone() for k, v in watched.items()}
    ambient = ambient_snapshot() if around is None else None  # a capture's begin and end are not the call's
    raised: BaseException | None = None
    seen = OpsSeen()
    try:
        with around() if around is not None else contextlib.nullcontext(), seen:
            call()
    except BaseException as exc:  # noqa: BLE001 — the point is to see what it raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        raised = exc
    leaked = ambient_since(ambient) if ambient is not None else []
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    exp_names = expected.__name__ if isinstance(expected, type) else "/".join(e.__name__ for e in expected)
    changed = differing({k: (v, before[k]) for k, v in watched.items()})
    if raised is None:
        detail = f"call was accepted; expected {exp_names}"
        ok = False
    elif not isinstance(raised, expected):
        detail = f"raised {type(raised).__name__}: {raised}; expected {exp_names}"
        ok = False
    else:
        detail = f"raised {type(raised).__name__}: {raised}"
        ok = True
    if changed:
        ok = False
        detail += f"; changed: {', '.join(changed)}"
    if leaked:
        ok = False
        detail += f"; changed the caller's process state: {', '.join(leaked)} (properties/ambient.py)"
    if raised is not None and seen.collectives:
        ok = False
        detail += (f"; ran {_listed(seen.collectives)} before it raised (a rank whose operand alone is bad pairs it "
                   f"with its peers' next collective, or hangs them)")
    if raised is not None and no_work and seen.work:
        ok = False
        detail += f"; queued work before it raised: {_listed(seen.work)} (the check must come first)"
    return CheckResult(name=name, passed=ok, rank=rank, total=len(watched), n_wrong=len(changed), detail=detail,
                       extra={"raised": type(raised).__name__ if raised else None,
                              "collectives_before_raise": list(dict.fromkeys(seen.collectives)) if raised else [],
                              "work_before_raise": list(dict.fromkeys(seen.work)) if raised else []})


def _listed(ops: list[str]) -> str:
    names = list(dict.fromkeys(ops))
    return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold identical bits (NaN payloads and signed zeros included)."""
    return not differing({"": (a, b)})


def differing(pairs: dict) -> list:
    """The labels of ``pairs`` (label -> (a, b)) whose tensors do not hold identical bits (shape, dtype, and
    every byte: NaN payloads and signed zeros included). Each pair is compared where its data is; the answers
    are read back at once (one transfer per device): on a GPU that ranks time-slice, every read-back waits for
    the device, and a bad call watches a dozen tensors."""
    verdicts: dict = {}
    for label, (a, b) in pairs.items():
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            verdicts[label] = True
        elif a.numel() == 0:
            verdicts[label] = False
        else:
            verdicts[label] = _any_word_differs(a, b)
    flags = read_back(list(verdicts.values()))
    return [label for label, flag in zip(verdicts, flags) if flag]


def _any_word_differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor on the tensors' device: some byte of ``a`` differs from ``b``'s (same shape, dtype)."""
    # contiguous(): a watched tensor may be a strided view (the non-contiguous bad call itself)
    fa, fb = (t.detach().reshape(-1).contiguous().view(torch.uint8) for t in (a, b))
    for wide in (torch.int64, torch.int32):  # compare in wide words where the bytes allow it: several times faster
        try:
            return (fa.view(wide) != fb.view(wide)).any()
        except RuntimeError:  # size or offset not a multiple of the word
            continue
    return (fa != fb).any()


def call_raised(exc: BaseException, *, rank=None, what: str = "a valid call", name="call_raised") -> CheckResult:
    """The failed check for ``what`` (a valid call of the implementation) having raised ``exc``."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return CheckResult(name=name, passed=False, rank=rank, detail=f"{what} raised {type(exc).__name__}: {exc}\n{tb}",
                       extra={"raised": type(exc).__name__, "message": str(exc)})
