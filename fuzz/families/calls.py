"""The one door every valid implementation call of a case goes through (bad calls go through
``properties.rejected_cleanly`` instead: they must raise). :meth:`CaseCalls.call` makes the call and
records, per call (each check's ``extra`` has the call's ``call`` tag and ``M``):

* ``call_raised``      — the valid call raised: the implementation's failure, with type, message and
  traceback (the family stops: :class:`CallRaised`); so is an exception out of any method of the implementation a
  check queries (:meth:`CaseCalls.raised_in_implementation`), and a fault the GPU reports after the calls is a
  ``device_fault`` (:meth:`CaseCalls.device_fault`); any other exception is a harness error;
* ``path_taken``       — ``last_path`` (reset to None before the call) is ``expected_path(x, w)``;
  ``extra``: ``path``, ``expected``, ``reason`` (non-empty for a legitimate fallback);
* ``declared_config_served`` — a failure only: ``expected_path`` sends the call to the fallback (``can_run`` said no)
  where the instance's class declares that its main path serves its (N, K) and group size (``supports``,
  ``supports_group``): a silent fallback behind a legitimate one (``path_taken`` passes it);
* ``result_contract``  — bf16, (ceil(M/W), N), on the implementation's device, contiguous;
* ``returns_out``      — with ``out=``: the result is ``out``;
* ``fresh_result``     — without ``out=``: no storage shared with ``state_tensors()``, a held result or the call's
                         own x and w;
* ``fresh_padding_zero`` — without ``out=``: padding rows are +0.0 (not inside a graph capture: no values yet);
* ``inputs_untouched`` — at the end of the case: no eager call changed its ``x`` or ``w`` (compared on the device
  right after each call, read back once), nor did any torch op of the call write into the storages x, w or out view
  (out's own bytes aside: :func:`properties.caller_writes`), put back before it returned or not -- and no op a
  captured call dispatched inside its capture writes there (each replay of the graph makes those writes);
* ``ambient_state_kept`` — at the end of the case: no eager call, nor the construction of an instance in the case
  (``RankContext.new_impl``), left the caller's current device or stream, grad mode, default dtype, math flags or
  random generators changed (host reads right before and after each, ``properties/ambient.py``).

A case's eager calls may run under autograd modes in turn (``Case.autograd``, :data:`AUTOGRAD_MODES`; its
constructions then under ``torch.inference_mode()``, :meth:`CaseCalls.construction`) and its constructions and eager
calls under an engine's tensor defaults (``Case.defaults``, :func:`caller_defaults`); the mode and the defaults are in
each call's tag and each construction's label.

Results of eager calls are held with a copy taken on return; :meth:`CaseCalls.finish` checks at the end
of the case that each still has those bits (``earlier_results_unchanged``). A result that broke the
result contract is replaced, for the family's value checks, by a conforming stand-in (bf16 (S, N) on the
device, the overlapping part of the result copied, NaN elsewhere): the case has already failed, and every
rank keeps the same collective schedule instead of crashing or hanging on a wrong-shaped tensor.
"""

from __future__ import annotations

import contextlib

import torch

from oracle.shards import shard_rows, valid_rows
from properties import (
    ambient_since,
    ambient_snapshot,
    ambient_state_kept,
    call_raised,
    caller_writes,
    declared_claim,
    declared_config_served,
    device_fault,
    fresh_padding_zero,
    fresh_result,
    inputs_changed,
    inputs_untouched,
    is_device_fault,
    path_taken,
    result_contract,
    results_unchanged,
    returns_out,
    watch_inputs,
)
from properties.rejection import OpsSeen
from properties.result import CheckResult

#: The autograd modes a case with ``autograd="rotate"`` makes its eager calls in, in turn from the case's first call:
#: an inference server's warm-up and calls run under ``torch.inference_mode()`` (a tensor the implementation creates
#: there is an inference tensor, which no in-place op may write outside that mode), evaluation code under
#: ``torch.no_grad()``, a training loop with grad enabled -- a layer's calls may come in any of them, in any order.
AUTOGRAD_MODES = {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad, "grad": torch.enable_grad}

#: The caller's tensor defaults a case with ``defaults="engine"`` builds its instances and makes its eager calls under:
#: an engine builds its layers -- and some run them -- with the model's dtype as the default dtype and the device as
#: the default device (vLLM's ``set_default_torch_dtype(dtype)`` and ``torch.device(device)`` around model
#: construction), so a tensor an implementation creates without naming its dtype or device is bf16 there, on that
#: device: flag words allocated with the default dtype and reinterpreted as int32 are half as many.
ENGINE_DEFAULT_DTYPE = torch.bfloat16


@contextlib.contextmanager
def caller_defaults(how: str | None, device):
    """The implementation's construction or call under the caller's tensor defaults ``how`` (None: as they are;
    "engine": :data:`ENGINE_DEFAULT_DTYPE` and ``device`` as the default dtype and device), set back after."""
    if how is None:
        yield
        return
    if how != "engine":
        raise ValueError(f"unknown caller defaults {how!r}: 'engine' or None")
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(ENGINE_DEFAULT_DTYPE)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(dtype)


class CallRaised(Exception):
    """A valid call of the implementation raised; recorded as a failed ``call_raised`` check."""


def raised_by_call(exc: BaseException | None) -> bool:
    """Whether ``exc`` is (or was raised while handling) a valid call's exception: a CUDA-graph capture
    that ends after a raising call may raise its own error on top of it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CallRaised):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


class CaseCalls:
    """The calls of one case on one rank: their checks and the results the caller holds."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.checks: list[CheckResult] = []
        self._held: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (label, result, copy on return)
        # (label, whether the call changed its x, w: on device -- None for a captured call --, the writes its ops made
        # into the caller's memory)
        self._inputs: list[tuple[str, torch.Tensor | None, list[str]]] = []
        self._ambient: list[tuple[str, list[str]]] = []  # (label, what the call changed of the caller's process)
        self._ambient_calls = 0  # of them, calls (the others: constructions)
        self._unread: set[str] = set()  # items of the snapshots this torch could not read
        self._autograd: list[str] | None = None  # rotate_autograd: the modes eager calls take in turn
        self.defaults: str | None = None  # caller_defaults of the case's constructions and eager calls
        self._eager_calls = 0
        self._claims: dict[tuple, str | None] = {}  # (class, N, K, W, device) -> its declaration (declared_claim)
        self.trail: list[str] = []  # every call begun, with the kernel path it was to take (trail_text)

    def rotate_autograd(self, how: str) -> None:
        """``how`` "rotate": this case's eager calls run under :data:`AUTOGRAD_MODES` in turn, the first under
        ``torch.inference_mode()`` (a server's warm-up: state an implementation creates lazily at its first call is
        then an inference tensor); the mode is part of each call's tag. Captured calls run in the caller's mode."""
        if how != "rotate":
            raise ValueError(f"unknown autograd setting {how!r}: 'rotate' or None")
        self._autograd = list(AUTOGRAD_MODES)

    def _next_mode(self, captured: bool) -> str | None:
        if self._autograd is None or captured:
            return None
        mode = self._autograd[self._eager_calls % len(self._autograd)]
        self._eager_calls += 1
        return mode

    def call(self, impl, x, w, out=None, *, tag: str, captured: bool = False, hold: bool = True,
             rank: int | None = None, world_size: int | None = None):
        """``impl(x, w, out=out)`` with the per-call checks. ``captured``: inside a CUDA-graph capture
        (metadata checks only; nothing held). ``hold``: keep the result for ``earlier_results_unchanged``
        (False for a throwaway instance's result, which the case does not keep as the caller's).
        ``rank``, ``world_size``: the group rank and size of the TP group the call runs on (default the
        ledger's): the harness's own knowledge, never the implementation's idea of its rank."""
        r = self.rank if rank is None else rank
        W = self.world_size if world_size is None else world_size
        M = int(x.shape[0])
        mode = self._next_mode(captured)
        tag = tag if captured else self._tagged(tag, mode)
        S, n_valid = shard_rows(M, W), valid_rows(M, W, r)
        expected, reason = impl.expected_path(x, w)
        if expected != impl.main_path:
            self._held_to_declaration(impl, f"valid call {tag} (M={M}): can_run says no ({reason or 'no reason given'})"
                                            f" and the contract sends it to {expected!r}", tag, M, r)
        self.trail.append(f"{tag} M={M} group rank {r}/{W} {'captured ' if captured else ''}expected path "
                          f"{expected}{kernel_path(impl, M) if expected == impl.main_path else ''}")
        impl.last_path = None
        watched = watch_inputs(x, w) if not captured else None
        signature = tuple(getattr(impl, "fallback_ops", ()) or ()) if expected == impl.main_path else ()
        seen = OpsSeen()  # the ops it dispatches, and what they wrote (captured: the writes each replay makes)
        # the snapshots inside the mode's context: its exit restores grad mode, which would hide a call's leak of it
        with AUTOGRAD_MODES[mode]() if mode is not None else contextlib.nullcontext(), \
                self.as_the_caller(f"{tag} (M={M})", impl.device) if not captured else contextlib.nullcontext():
            try:
                with seen:
                    y = impl(x, w, out=out)
            except Exception as exc:
                self._record(call_raised(exc, rank=r, what=f"valid call {tag} (M={M})"), tag, M)
                raise CallRaised(f"{type(exc).__name__} in call {tag}") from exc
        wrote = caller_writes(seen.written, x, w, out)
        if watched is not None:
            self._inputs.append((f"{tag} (M={M})", inputs_changed(x, w, watched), wrote))
        else:  # captured: nothing ran yet, but each replay makes the writes the capture's ops recorded
            self._inputs.append((f"{tag} (M={M}) captured", None, wrote))
        contract = result_contract(y, shape=(S, impl.N), device=impl.device, rank=r)
        ran = tuple(op for op in seen.ops() if op in signature)
        checks = [path_taken(impl.last_path, expected, reason, rank=r, main_path=impl.main_path, fallback_ops_ran=ran),
                  contract]
        if out is not None:
            checks.append(returns_out(y, out, rank=r))
        elif isinstance(y, torch.Tensor):
            others = {f"state tensor '{k}'": t for k, t in impl.state_tensors().items()}
            others.update({f"the result of {label}": t for label, t, _ in self._held})
            others.update({f"this call's {name}": t for name, t in (("x", x), ("w", w)) if isinstance(t, torch.Tensor)})
            checks.append(fresh_result(y, others, rank=r))
            if contract.passed and not captured:
                checks.append(fresh_padding_zero(y, n_valid, rank=r, row_offset=r * S))
        for c in checks:
            self._record(c, tag, M)
        if not contract.passed:
            return conformed(y, (S, impl.N), impl.device)
        if hold and not captured:
            self._held.append((f"{tag} (M={M})", y, y.detach().clone()))
        return y

    def _held_to_declaration(self, impl, what: str, tag: str, M: int, rank: int) -> None:
        """A call the contract sends elsewhere than the main path (``what``): a failed ``declared_config_served`` where
        the instance's class declares that its main path serves its (N, K) and group size on a host that builds it
        (:func:`properties.declared_claim`; a host that cannot fails ``main_path_available`` instead)."""
        dims = tuple(getattr(impl, a, None) for a in ("N", "K", "world_size"))
        key = (type(impl), *dims, str(getattr(impl, "device", "")))
        if key not in self._claims:
            claim = declared_claim(*key[:4]) if None not in key else None
            support = getattr(impl, "main_path_support", None)
            self._claims[key] = claim if claim and (support is None or support()) else None
        if self._claims[key]:
            self._record(declared_config_served(self._claims[key], what, rank=rank), tag, M)

    def _tagged(self, what: str, mode: str | None) -> str:
        """``what`` with the autograd mode and the tensor defaults it runs under, as a call's tag or a construction's
        label names them."""
        what = what if mode is None else f"{what} [{mode}]"
        return what if self.defaults is None else f"{what} [{self.defaults} defaults]"

    @contextlib.contextmanager
    def construction(self, what: str, device):
        """The construction ``what`` of an instance as the case's caller makes it (:meth:`as_the_caller`), and -- in a
        case whose eager calls rotate autograd modes -- under ``torch.inference_mode()``: an engine that builds its
        layers inside an inference-mode ``main`` or its warm-up (or the layer its communication state lazily, at the
        first forward) gets inference tensors for every buffer the constructor allocates, and its later calls under
        ``no_grad`` or grad may not write them in place (the 30th session's fallback bug, at construction)."""
        mode = "inference_mode" if self._autograd is not None else None
        with AUTOGRAD_MODES[mode]() if mode is not None else contextlib.nullcontext(), \
                self.as_the_caller(self._tagged(what, mode), device, call=False):
            yield

    @contextlib.contextmanager
    def as_the_caller(self, label: str, device, *, call: bool = True):
        """The implementation's eager call (``call=False``: its construction) ``label`` as the case's caller makes
        it: under the case's tensor defaults (:func:`caller_defaults`), the caller's process snapshotted inside them
        (their exit restores the defaults, which would hide a leak of one), what it changed noted for
        ``ambient_state_kept`` when it returns (:meth:`ambient_kept`; not when it raises: ``call_raised`` judges
        that)."""
        with caller_defaults(self.defaults, device):
            before = ambient_snapshot(device)
            yield
            self.ambient_kept(label, before, device, call=call)

    def ambient_kept(self, label: str, before, device, *, call: bool = True) -> None:
        """Note for ``ambient_state_kept`` what the call (``call=False``: the construction) ``label`` changed of the
        caller's process since ``before`` (``properties.ambient``), and set it back at once: the harness's own work
        after it runs in the caller's state, and each call that leaks fails, not only a process's first."""
        self._ambient.append((label, ambient_since(before, device)))
        self._unread.update(before.unread)
        self._ambient_calls += call

    def capture_failed(self, exc: BaseException, *, tag: str, M: int, rank: int | None = None) -> CallRaised:
        """Record a CUDA-graph capture of valid call ``tag`` that failed when it ended (the implementation's
        work left the capture unjoined, synchronised, or ran outside it) as a failed ``call_raised``; return
        the :class:`CallRaised` to raise."""
        what = f"capturing valid call {tag} (M={M}) in a CUDA graph"
        self._record(call_raised(exc, rank=self.rank if rank is None else rank, what=what), tag, M)
        return CallRaised(f"{type(exc).__name__} while {what}")

    def finish(self) -> list[CheckResult]:
        """``earlier_results_unchanged`` over every result held, ``inputs_untouched`` and ``ambient_state_kept`` over
        every eager call (none: no check), then let them go."""
        out = []
        if self._held:
            out.append(results_unchanged(self._held, rank=self.rank))
        if self._inputs:
            out.append(inputs_untouched(self._inputs, rank=self.rank))
        if self._ambient_calls or any(changed for _, changed in self._ambient):
            # constructions alone, kept, are no check of their own: a case whose family did not run stays skipped
            out.append(ambient_state_kept(self._ambient, rank=self.rank, unread=tuple(sorted(self._unread))))
        for res in out:
            res.extra.setdefault("call", "end of case")
        self._held.clear()
        self._inputs.clear()
        self._ambient.clear()
        self._ambient_calls = 0
        self._unread.clear()
        return out

    def device_fault(self, exc: BaseException) -> CheckResult | None:
        """A failed ``device_fault`` when ``exc`` is a fault the GPU reported after this rank called the
        implementation in the case (properties/device_fault.py); None for anything else (the harness's error) or
        before any call."""
        if not self.trail or not is_device_fault(exc):
            return None
        return device_fault(exc, self.trail_text(), rank=self.rank)

    def raised_in_implementation(self, exc: BaseException, factory) -> CheckResult | None:
        """A failed ``call_raised`` when ``exc`` passed through a method of the implementation
        (:func:`implementation_method`: its ``guard_regions()``, ``expected_path()``, ...): a valid query of its
        interface that raised is the implementation's failure as a valid call that raised is; None when no frame
        of the implementation's is in the traceback (the harness broke)."""
        method = implementation_method(exc, factory)
        if method is None:
            return None
        return call_raised(exc, rank=self.rank, what=f"the implementation's {method}()")

    def began(self, tag: str, M: int, how: str) -> None:
        """A call of the implementation a family makes directly, not through :meth:`call` (``how``: why -- the memory
        probe's dropped results, a bad call): in the trail all the same, so a GPU fault after it is the
        implementation's (:meth:`device_fault`) and its kernels show beside the other ranks'."""
        self.trail.append(f"{tag} M={M} ({how})")

    def trail_text(self, last: int = 8) -> str:
        """The last ``last`` calls this rank began in the case, oldest first: beside a GPU fault that surfaced
        later (a kernel's trap at the next synchronise), the ranks' trails show which kernels they ran -- ranks
        that ran different kernels for one call wait for each other forever."""
        shown = self.trail[-last:]
        more = f" (the last {len(shown)} of {len(self.trail)})" if len(self.trail) > len(shown) else ""
        return f"calls this rank began in the case{more}:\n" + "\n".join(f"  {t}" for t in shown)

    def _record(self, check: CheckResult, tag: str, M: int) -> None:
        check.extra.setdefault("call", tag)
        check.extra.setdefault("M", M)
        self.checks.append(check)


def kernel_path(impl, M: int) -> str:
    """`` (kernel path ...)`` where the implementation names the code path a call of M rows runs (its
    ``path_table()``), else ``""``."""
    from properties.dispatch import path_at

    try:
        table = getattr(impl, "path_table", None)
        pieces = table() if callable(table) else None
        return f" (kernel path {path_at(pieces, M)})" if pieces else ""
    except Exception as exc:  # noqa: BLE001 -- a diagnostic: the call itself reports what is wrong
        return f" (kernel path unknown: {type(exc).__name__}: {exc})"


def conformed(y, shape: tuple[int, int], device) -> torch.Tensor:
    """A bf16 ``shape`` tensor on ``device`` holding the part of ``y`` that overlaps it, NaN elsewhere."""
    stand_in = torch.full(shape, float("nan"), dtype=torch.bfloat16, device=device)
    if isinstance(y, torch.Tensor) and y.dim() == 2 and y.device.type != "meta":
        rows, cols = min(shape[0], y.shape[0]), min(shape[1], y.shape[1])
        stand_in[:rows, :cols] = y[:rows, :cols].to(device=device, dtype=torch.bfloat16)
    return stand_in


#: The harness's packages: an object of theirs is never the implementation.
HARNESS = ("fuzz.", "properties.", "oracle.")


def implementation_method(exc: BaseException, factory) -> str | None:
    """``Class.method`` of the innermost frame of ``exc``'s traceback that runs a method of an implementation
    object -- a :class:`kernel.interface.GemmRsImplementation`, or of the class the factory builds (a duck-typed
    one) -- or None. A harness error's traceback holds none (the harness calls the implementation's methods with
    what the contract allows: the kill matrix's control, the correct implementation through the same calls, checks
    that)."""
    from kernel.interface import GemmRsImplementation

    module = getattr(factory, "__module__", None)
    if module is not None and module.startswith(HARNESS):
        module = None
    found = None
    tb = exc.__traceback__
    while tb is not None:
        me = tb.tb_frame.f_locals.get("self")
        if me is not None and (isinstance(me, GemmRsImplementation) or type(me).__module__ == module):
            found = f"{type(me).__name__}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return found
