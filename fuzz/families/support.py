"""Shapes an implementation does not declare (CONTRACT.md, "Shapes"): ``supports(N, K)`` says no, so the
shape must be rejected with a typed error or served by the fallback per ``can_run``.

``unsupported_shape_handled`` (one check per case whose (N, K) the implementation's class declares
unsupported; :func:`construction_rejected` and :func:`instance_handles`):

* construction raised :class:`~kernel.errors.UnsupportedConfigError`: passed (rejected with its typed error);
* an instance whose ``can_run`` says yes for that shape's weight: failed (it declares the shape unsupported
  yet would run its main path on it — which of the two is wrong, the check cannot tell);
* no fallback (``fallback_path`` None): one call must raise ``UnsupportedConfigError`` (any exception where
  ``typed_errors`` is waived) and change nothing; the family does not run;
* a fallback: passed with ``can_run``'s reason, and the family runs — each call's ``path_taken`` then holds
  it to the fallback path and the value checks to the right result.
"""

from __future__ import annotations

import kernel.errors as kerr
from oracle.shards import shard_rows
from properties import rejected_cleanly, sentinel_like
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, waiver

NAME = "unsupported_shape_handled"


def declared(factory, N: int, K: int):
    """``factory.supports(N, K)`` (an Eligibility), or None when the factory declares nothing (then every
    shape counts as declared: the families check it)."""
    supports = getattr(factory, "supports", None)
    return supports(N, K) if supports is not None else None


def construction_rejected(exc: BaseException, case: Case, why: str, *, rank: int) -> CheckResult:
    return CheckResult(name=NAME, passed=True, rank=rank,
                       detail=f"(N, K) = ({case.N}, {case.K}) declared unsupported ({why}); construction raised "
                              f"{type(exc).__name__}: {exc}",
                       extra={"N": case.N, "K": case.K, "handled": "rejected at construction"})


def instance_handles(ctx: RankContext, impl, case: Case, why: str) -> tuple[CheckResult, bool]:
    """(the check, whether the family should still run: only where the fallback serves the calls)."""
    r = ctx.rank
    w = ctx.w(case, case.seed)
    ok = impl.can_run(w)
    extra = {"N": case.N, "K": case.K}
    head = f"(N, K) = ({case.N}, {case.K}) declared unsupported ({why})"
    if ok:
        return CheckResult(name=NAME, passed=False, rank=r, extra=extra,
                           detail=f"{head}, yet can_run says the main path {impl.main_path!r} runs it: "
                                  "supports() and can_run() disagree"), False
    if impl.fallback_path is not None:
        extra["handled"] = f"fallback {impl.fallback_path}"
        return CheckResult(name=NAME, passed=True, rank=r, extra=extra,
                           detail=f"{head}; can_run says no ({ok.reason or 'no reason given'}): the calls must "
                                  f"take the fallback {impl.fallback_path!r} (path_taken)"), True
    M = case.ms[0]
    x = ctx.x(case, case.seed, M)
    out = None if waiver(impl, "out_param") else sentinel_like((shard_rows(M, ctx.world_size), case.N),
                                                                device=ctx.device)
    expected = Exception if waiver(impl, "typed_errors") else kerr.UnsupportedConfigError
    watched = {**impl.state_tensors(), "x": x, "w": w}
    if out is not None:
        watched["out"] = out
    res = rejected_cleanly(lambda: impl(x, w, out=out), expected, watched, rank=r, name=NAME)
    res.detail = f"{head}, no fallback: a call must raise its typed error; {res.detail}"
    res.extra.update(extra, handled="rejected by the call", M=M)
    return res, False
