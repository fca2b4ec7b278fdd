"""What a call returns (CONTRACT.md, "Result"), checked on every call, metadata first:

* ``result_contract``   — a torch.Tensor, bf16, shape (ceil(M/W), N), on the implementation's device,
  contiguous;
* ``returns_out``       — with ``out=``, the returned tensor is ``out`` (same data pointer, shape, strides);
* ``fresh_result``      — without ``out=``, it shares no storage (byte ranges of the untyped storages) with
  the implementation's state tensors (workspaces, flags) nor with any earlier result the caller holds;
* ``fresh_padding_zero`` — without ``out=``, its padding rows (``r*S + i >= M``) hold +0.0, bit for bit,
  as the oracle's do;
* ``earlier_results_unchanged`` — at the end of a case every result the caller still holds has the bits it
  had when it was returned: a later call must not change what the caller holds;
* ``inputs_untouched`` — a call leaves ``x`` and ``w`` with the bits they had before it: the caller's
  activations and weights are read-only to the implementation (an input used as scratch, scaled in place and
  scaled back with rounding, a weight transposed in place), and so are the bytes around a view of a larger
  buffer (the whole buffer is compared: x padded to its shard rows in place). Compared on the inputs' device
  right after each call (:func:`watch_inputs`, :func:`inputs_changed`: no wait), read back once at the end of
  the case.
"""

from __future__ import annotations

import torch

from .exact import bitwise_equal
from .padding import padded_rows_untouched
from .rejection import _any_word_differs, differing
from .result import CheckResult, read_back


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index == b.index or a.index is None or b.index is None)


def result_contract(y, *, shape: tuple[int, int], device: torch.device, rank=None,
                    name="result_contract") -> CheckResult:
    """``shape``: (ceil(M/W), N); ``device``: the implementation's device."""
    if not isinstance(y, torch.Tensor):
        problems = [f"returned a {type(y).__name__}, not a torch.Tensor"]
    else:
        problems = []
        if y.dtype != torch.bfloat16:
            problems.append(f"dtype {y.dtype}, expected torch.bfloat16")
        if tuple(y.shape) != tuple(shape):
            problems.append(f"shape {tuple(y.shape)}, expected (ceil(M/W), N) = {tuple(shape)}")
        if not _same_device(y.device, torch.device(device)):
            problems.append(f"on {y.device}, the implementation runs on {device}")
        if not y.is_contiguous():
            problems.append(f"not contiguous (strides {y.stride()})")
    return CheckResult(name=name, passed=not problems, rank=rank, total=4, n_wrong=len(problems),
                       detail="; ".join(problems) if problems else f"bf16 {tuple(shape)} contiguous on {device}")


def returns_out(y, out: torch.Tensor, *, rank=None, name="returns_out") -> CheckResult:
    """With ``out=`` the call returns ``out`` itself (a caller that keeps ``out`` reads the result there)."""
    same = (isinstance(y, torch.Tensor) and y.data_ptr() == out.data_ptr() and tuple(y.shape) == tuple(out.shape)
            and y.stride() == out.stride() and y.dtype == out.dtype and y.device == out.device)
    if same:
        return CheckResult(name=name, passed=True, rank=rank, detail="returned the out= tensor")
    if isinstance(y, torch.Tensor):
        got = f"data_ptr {y.data_ptr():#x} shape {tuple(y.shape)} strides {y.stride()}"
    else:
        got = type(y).__name__
    return CheckResult(name=name, passed=False, rank=rank,
                       detail=f"the returned tensor is not the out= tensor: got {got}, out has data_ptr "
                              f"{out.data_ptr():#x} shape {tuple(out.shape)} strides {out.stride()}")


def storage_span(t: torch.Tensor) -> tuple[torch.device, int, int]:
    """(device, first byte, one past the last byte) of the whole storage behind ``t`` (not only the view)."""
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return t.device, start, start + storage.nbytes()


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the storages behind ``a`` and ``b`` overlap in memory (views of one buffer do)."""
    da, a0, a1 = storage_span(a)
    db, b0, b1 = storage_span(b)
    if da != db or da.type == "meta" or a0 == a1 or b0 == b1:
        return False
    return a0 < b1 and b0 < a1


def fresh_result(y: torch.Tensor, held: dict[str, torch.Tensor], *, rank=None, name="fresh_result") -> CheckResult:
    """``held``: label -> tensor the result must not share storage with (the implementation's state
    tensors, earlier results of the case)."""
    shared = [label for label, t in held.items() if isinstance(t, torch.Tensor) and shares_storage(y, t)]
    if shared:
        return CheckResult(name=name, passed=False, rank=rank, total=len(held), n_wrong=len(shared),
                           detail=f"the result (out=None) shares storage with {', '.join(shared)}: a later call "
                                  f"(or the implementation itself) changes what the caller holds")
    return CheckResult(name=name, passed=True, rank=rank, total=len(held),
                       detail=f"own storage (checked against {len(held)} tensors)")


def fresh_padding_zero(y: torch.Tensor, n_valid: int, *, rank=None, row_offset=0,
                       name="fresh_padding_zero") -> CheckResult:
    """Rows ``n_valid:`` of a fresh result (out=None) are +0.0, bit for bit (the oracle's padding rows)."""
    res = padded_rows_untouched(y, torch.zeros_like(y), n_valid, rank=rank, row_offset=row_offset, name=name)
    if not res.passed and not res.skipped:
        res.detail = "a fresh result's padding rows must hold +0.0 bit for bit, as the oracle's do"
    return res


def results_unchanged(held: list[tuple[str, torch.Tensor, torch.Tensor]], *, rank=None,
                      name="earlier_results_unchanged") -> CheckResult:
    """``held``: (label, result as the caller holds it, copy taken when it was returned). Every result
    still has its bits (all rows, padding included). Reports the first one that changed."""
    differ = set(differing({i: (now, then) for i, (_, now, then) in enumerate(held)}))
    changed = [entry for i, entry in enumerate(held) if i in differ]
    if not changed:
        return CheckResult(name=name, passed=True, rank=rank, total=len(held),
                           detail=f"{len(held)} results the caller holds kept their bits")
    _, now, then = changed[0]
    first = bitwise_equal(now, then, now.shape[0], rank=rank, name=name)  # locates the first change
    first.passed, first.skipped = False, False
    labels = [label for label, _, _ in changed]
    first.extra["changed"] = labels
    first.detail = (f"{len(changed)} of {len(held)} results changed after they were returned: {', '.join(labels)} "
                    f"(the first shown): a later call wrote into memory the caller holds")
    return first


def watch_inputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of a call's ``x`` and ``w`` -- of the whole buffer each is a view of, where it is one (the bytes
    around the operand are the caller's too: a packed activation's neighbours) -- taken before it
    (:func:`inputs_changed` compares after it)."""
    return extent(x).detach().clone(), extent(w).detach().clone()


def extent(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage ``t`` views (``t`` itself when it views none)."""
    return t._base if t._base is not None else t


def inputs_changed(x: torch.Tensor, w: torch.Tensor, before: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """bool[2] on the inputs' device: whether ``x``, ``w`` (their whole buffers) differ in any byte from
    ``before``. Queued right after the call on the current stream (it sees the call's stream-ordered writes, and
    none of the caller's later ones); nothing waits for it here."""
    return torch.stack([_any_word_differs(extent(x), before[0]), _any_word_differs(extent(w), before[1])])


def caller_writes(written, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None) -> list[str]:
    """What of the caller's memory the ops of a call wrote (``written``: :attr:`properties.rejection.OpsSeen.written`),
    as "<op> into <x | w | the buffer around out>": any byte of the storages x, w and out view but out's own. Bytes
    put back before the call returned are caught here (the call's ops are seen, not only its end state): a reader of
    the caller's on another stream, or its next kernel, sees what was there meanwhile."""
    from .rejection import byte_span

    regions = [(label, *storage_span(t)) for label, t in (("x", x), ("w", w), ("the buffer around out", out))
               if isinstance(t, torch.Tensor) and t.numel()]
    own = byte_span(out) if isinstance(out, torch.Tensor) else None
    found: list[str] = []
    for op, device, start, end in written:
        pieces = [(start, end)]
        if own is not None and device == out.device:  # out's own bytes are the call's to write
            pieces = [(start, min(end, own[0])), (max(start, own[1]), end)]
        for label, where, lo, hi in regions:  # named by the first region it reaches (x, w, out may share a buffer)
            if where == device and any(max(a, lo) < min(b, hi) for a, b in pieces):
                entry = f"{op} into {label}"
                if entry not in found:
                    found.append(entry)
                break
    return found


def inputs_untouched(changed: list[tuple], *, rank=None, name="inputs_untouched") -> CheckResult:
    """``changed``: (call label, :func:`inputs_changed` of that call[, :func:`caller_writes` of it]). One read-back for
    all of them. A captured call (its :func:`inputs_changed` None: it ran nothing yet) is judged by its ops' writes
    alone -- each replay of its graph makes them."""
    n = len(changed)
    ended = [entry for entry in changed if entry[1] is not None]
    e = len(ended)
    flags = read_back([entry[1][0] for entry in ended] + [entry[1][1] for entry in ended])
    bad = [(entry[0], [which for which, flag in (("x", flags[i]), ("w", flags[e + i])) if flag])
           for i, entry in enumerate(ended)]
    bad = [(label, which) for label, which in bad if which]
    wrote = [(entry[0], entry[2]) for entry in changed if len(entry) > 2 and entry[2]]
    if not bad and not wrote:
        captured = f"; {n - e} captured calls' ops wrote none of the caller's memory" if n > e else ""
        return CheckResult(name=name, passed=True, rank=rank, total=n,
                           detail=f"{e} calls left their x and w with the bits they had{captured}")
    labels = list(dict.fromkeys([label for label, _ in bad] + [label for label, _ in wrote]))
    parts = []
    if bad:
        what = ", ".join(f"{label}: {' and '.join(which)}" for label, which in bad)
        parts.append(f"{len(bad)} of {e} calls changed their inputs ({what})")
    if wrote:
        what = "; ".join(f"{label}: {', '.join(ops)}" for label, ops in wrote)
        parts.append(f"{len(wrote)} of {n} calls wrote into the caller's memory while they ran, put back or not "
                     f"({what})")
    return CheckResult(name=name, passed=False, rank=rank, total=n, n_wrong=len(labels),
                       extra={"changed": labels},
                       detail="; ".join(parts) + ": x and w, and the buffers they and out are views of (out's own "
                              "bytes aside), are the caller's, read-only to the implementation")
