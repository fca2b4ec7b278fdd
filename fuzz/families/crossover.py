"""Where an implementation's answers switch with M: ``should_run``'s crossover (and the fused kernel's
path switches, ``path_switches``), found on the rank side so a family can call on both sides of it whatever the
implementation's threshold is (the contract's default is 128; a tuned one depends on N, K, W)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..case import Case


def should_run_asker(device: torch.device, impl, case: Case) -> Callable[[int], bool]:
    """``ask(M)``: ``impl.should_run`` on the first M rows of one real (max_M, K) bf16 tensor."""
    x = torch.empty(case.max_M, case.K, dtype=torch.bfloat16, device=device)
    return lambda M: bool(impl.should_run(x[:M]))


def crossover_neighbours(ask: Callable[[int], bool], max_M: int) -> list[int]:
    """[c - 1, c] for the smallest c in 1..max_M with ``ask(c)`` true, by bisection as if ``ask`` were
    monotone ([1] when ask(1) is true; none when ask(max_M) is false)."""
    if not ask(max_M):
        return []
    lo, hi = 1, max_M  # ask(hi) is true
    while lo < hi:
        mid = (lo + hi) // 2
        if ask(mid):
            hi = mid
        else:
            lo = mid + 1
    return [m for m in (lo - 1, lo) if 1 <= m <= max_M]
