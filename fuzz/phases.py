"""Where a rank's case time goes: host seconds per named phase, for the case record and ``bench/bench_fuzz.py``.

A rank times the parts of a case the harness can name (:data:`PHASES`); what is left of the rank's round
trip is ``checks`` (the properties and the harness's own bookkeeping). Phases are host time: GPU work is
queued asynchronously, so it is charged to whichever phase waits for it: the families' own waits for the
device after their calls (``RankContext.sync``) are ``calls``; the oracle and the truth wait within theirs
-- the harness never adds a synchronisation to measure, which would change what a stream-ordering case
tests. A phase opened inside another is charged to the inner one only.

``construct`` includes whatever an implementation does when it is built (the fused kernel's compile or its
load from the host-wide kernel cache, its symmetric-memory rendezvous).
"""

from __future__ import annotations

import contextlib
import time

#: The phases a rank reports, in the order tables print them (``checks``: the rest of the round trip).
PHASES = ("construct", "inputs", "calls", "oracle", "truth", "checks")

_totals: dict[str, float] | None = None
_stack: list[list] = []  # [name, start, seconds charged to phases opened inside]


def begin() -> None:
    """Start timing a case (any earlier case's totals are dropped)."""
    global _totals
    _totals = dict.fromkeys(PHASES, 0.0)
    _stack.clear()


def end(total_seconds: float) -> dict[str, float]:
    """The case's phases, ``checks`` being ``total_seconds`` less the named ones (never negative)."""
    global _totals
    totals, _totals = _totals or dict.fromkeys(PHASES, 0.0), None
    _stack.clear()
    named = sum(v for k, v in totals.items() if k != "checks")
    totals["checks"] = max(0.0, total_seconds - named)
    return {k: round(v, 4) for k, v in totals.items()}


@contextlib.contextmanager
def phase(name: str):
    """Charge the time inside to ``name`` (a no-op outside a case)."""
    if name not in PHASES or name == "checks":
        raise ValueError(f"unknown phase {name!r}: one of {PHASES[:-1]}")
    if _totals is None:
        yield
        return
    frame = [name, time.perf_counter(), 0.0]
    _stack.append(frame)
    try:
        yield
    finally:
        _stack.pop()
        spent = time.perf_counter() - frame[1]
        if _totals is not None:
            _totals[name] += spent - frame[2]
            if _stack:
                _stack[-1][2] += spent


def slowest_rank(ranks: dict[int, dict]) -> dict[str, float]:
    """A case's phases: those of the rank whose phases took longest (the one the case waited for), from the
    ranks' result messages (``ranks``: rank -> message; a message without phases is left out)."""
    per_rank = [m["phases"] for m in ranks.values() if isinstance(m.get("phases"), dict)]
    return max(per_rank, key=lambda p: sum(p.values())) if per_rank else {}


def harness_seconds(case_seconds: float, phases: dict[str, float]) -> float:
    """The driver's share of a case's round trip: what its phases (the slowest rank's) do not account for."""
    return max(0.0, case_seconds - sum(phases.values()))


__all__ = ["PHASES", "begin", "end", "harness_seconds", "phase", "slowest_rank"]
