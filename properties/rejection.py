"""A bad call is rejected with the expected error type and changes nothing: every watched tensor
(out, the inputs, workspaces, flags) keeps its bytes. Under ``python -O`` too — the check is a call
and a comparison, not an ``assert``."""

from __future__ import annotations

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
    changed = [k for k, v in watched.items() if not _same_bits(v, before[k])]
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


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    # contiguous(): a watched tensor may be a strided view (the non-contiguous bad call itself)
    return bool(torch.equal(a.detach().reshape(-1).contiguous().view(torch.uint8),
                            b.detach().reshape(-1).contiguous().view(torch.uint8)))
