"""What a call raises. A bad call is rejected with the expected error type and changes nothing: every
watched tensor (out, the inputs, workspaces, flags) keeps its bytes (``rejected_cleanly``). Under
``python -O`` too — the check is a call and a comparison, not an ``assert``. A valid call raises nothing:
one that does is the implementation's failure (``call_raised``), with the exception's type, message and
traceback — not an error of the harness."""

from __future__ import annotations

import traceback

import torch

from .result import CheckResult


def rejected_cleanly(call, expected: type[BaseException] | tuple, watched: dict[str, torch.Tensor], *, rank=None,
                     name="rejected_cleanly") -> CheckResult:
    """Run ``call()``; pass iff it raises ``expected`` and no tensor in ``watched`` changed."""
    before = {k: v.detach().clone() for k, v in watched.items()}
    raised: BaseException | None = None
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 — the point is to see what it raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        raised = exc
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    exp_names = expected.__name__ if isinstance(expected, type) else "/".join(e.__name__ for e in expected)
    changed = [k for k, v in watched.items() if not same_bits(v, before[k])]
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
    return CheckResult(name=name, passed=ok, rank=rank, total=len(watched), n_wrong=len(changed), detail=detail,
                       extra={"raised": type(raised).__name__ if raised else None})


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold identical bits (NaN payloads and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    # contiguous(): a watched tensor may be a strided view (the non-contiguous bad call itself)
    fa, fb = (t.detach().reshape(-1).contiguous().view(torch.uint8) for t in (a, b))
    for wide in (torch.int64, torch.int32):  # compare in wide words where the bytes allow it: several times faster
        try:
            return bool(torch.equal(fa.view(wide), fb.view(wide)))
        except RuntimeError:  # size or offset not a multiple of the word
            continue
    return bool(torch.equal(fa, fb))


def call_raised(exc: BaseException, *, rank=None, what: str = "a valid call", name="call_raised") -> CheckResult:
    """The failed check for ``what`` (a valid call of the implementation) having raised ``exc``."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return CheckResult(name=name, passed=False, rank=rank, detail=f"{what} raised {type(exc).__name__}: {exc}\n{tb}",
                       extra={"raised": type(exc).__name__, "message": str(exc)})
