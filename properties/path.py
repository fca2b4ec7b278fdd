"""Path accountability (CONTRACT.md, "Path"): a verdict on an implementation is a verdict on its own path.

* ``main_path_available`` — the host can build the implementation's main path at all
  (``impl.main_path_support()``). When it cannot, every case fails with the reason: a gate that ran only
  a fallback has not gated the implementation.
* ``path_taken`` — the path a call ran (``impl.last_path``, reset before the call) is the one the contract
  has serve it (``impl.expected_path(x, w)``): the main path where ``can_run`` says yes, else the declared
  fallback with ``can_run``'s reason. A call that reports nothing, or another path, is a silent fallback
  (or a lie) and fails; a legitimate fallback passes and carries its reason. A call that reports the main path
  but dispatched an op only the fallback runs (the implementation's ``fallback_ops``, e.g. the fused kernel's
  fallback ``torch.mm``) lied about its path and fails too (23rd session).
"""

from __future__ import annotations

from .result import CheckResult


def main_path_available(support, *, main_path: str | None, rank=None, name="main_path_available") -> CheckResult:
    """``support``: the Eligibility ``impl.main_path_support()`` returned (truthy, ``.reason`` when not)."""
    if support:
        return CheckResult(name=name, passed=True, rank=rank, detail=f"main path {main_path!r} can be built here",
                           extra={"path": main_path})
    reason = getattr(support, "reason", "") or "main_path_support() gave no reason"
    return CheckResult(name=name, passed=False, rank=rank, extra={"path": main_path, "reason": reason},
                       detail=f"the main path {main_path!r} cannot be built on this host: {reason}; no case of "
                              f"this implementation can pass here (its own path would never run)")


def path_taken(path: str | None, expected: str | None, reason: str, *, rank=None, name="path_taken",
               main_path: str | None = None, fallback_ops_ran: tuple[str, ...] = ()) -> CheckResult:
    """``path``: what the call reported in ``last_path`` (None: nothing); ``expected``, ``reason``: what
    ``expected_path`` said before the call (reason empty for the main path). ``fallback_ops_ran``: the ops of the
    implementation's declared fallback signature (``fallback_ops``) the call dispatched: a call that reports the
    main path (``main_path``) and ran them ran the fallback under the main path's name."""
    extra = {"path": path, "expected": expected, "reason": reason}
    if fallback_ops_ran and path is not None and path == main_path:
        extra["fallback_ops_ran"] = list(fallback_ops_ran)
        return CheckResult(name=name, passed=False, rank=rank, extra=extra,
                           detail=f"the call reported the main path {path!r} but dispatched "
                                  f"{', '.join(sorted(set(fallback_ops_ran)))}, which only its fallback runs "
                                  f"(declared fallback_ops): the fallback ran under the main path's name")
    if expected is None:
        detail = f"no path serves this call (can_run: {reason}; no fallback declared), yet it ran {path!r}"
        return CheckResult(name=name, passed=False, rank=rank, detail=detail, extra=extra)
    if path is None:
        return CheckResult(name=name, passed=False, rank=rank, extra=extra,
                           detail=f"the call did not report its path (last_path is None); expected {expected!r}")
    if path != expected:
        why = f" (can_run: {reason})" if reason else " (can_run says the main path serves it)"
        return CheckResult(name=name, passed=False, rank=rank, extra=extra,
                           detail=f"the call ran path {path!r}, the contract has {expected!r} serve it{why}: "
                                  f"a silent fallback gates another implementation than the one named")
    detail = f"ran {path!r}" + (f" (legitimate fallback: {reason})" if reason else "")
    return CheckResult(name=name, passed=True, rank=rank, detail=detail, extra=extra)


def declared_claim(cls, N: int, K: int, world_size: int) -> str | None:
    """What the implementation class ``cls`` declares its main path serves at (N, K) on a group of ``world_size``,
    in words -- ``supports(N, K)`` and ``supports_group(W)`` both yes (CONTRACT.md, "Shapes") -- or None where it
    claims less, or nothing about groups (``supports_group`` None: then a group ``can_run`` declines cannot be told
    from a silent fallback)."""
    group = getattr(cls, "supports_group", None)
    shape = getattr(cls, "supports", None)
    if not callable(group) or not callable(shape):
        return None
    g, s = group(world_size), shape(N, K)
    if g is None or not g or not s:
        return None
    return (f"supports({N}, {K}) and supports_group({world_size}) declare that the main path "
            f"{getattr(cls, 'main_path', None)!r} serves it")


def declared_config_served(claim: str, what: str, *, rank=None, name="declared_config_served") -> CheckResult:
    """A failed check: ``what`` (a call the contract sends elsewhere than the main path, or a construction that
    raised UnsupportedConfigError) where the implementation's own declaration ``claim`` says its main path serves
    it. Its fallback may compute right -- the gate would then pass a run in which the named path never ran."""
    return CheckResult(name=name, passed=False, rank=rank, extra={"claim": claim},
                       detail=f"{what}, yet {claim}: a fallback or refusal the implementation declared it would "
                              f"not need (a silent fallback is no pass); fix can_run or the constructor, or declare "
                              f"the shape (supports) or the group size (supports_group) unsupported")
