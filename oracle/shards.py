"""Which rows of the M x N result each rank's shard holds (CONTRACT.md, "Result"): S = ceil(M / W) rows per rank,
rank r's shard the rows r*S .. r*S + S - 1 of the result, the ones at M and beyond padding.

The suite's own statement of the contract's row layout, written apart from the implementations' (``kernel.checks``
has theirs): the harness takes what it expects from here, so a wrong row count in the code under test -- an empty
rank's negative count, a shard size off by one -- is a disagreement the checks see, not an expectation the gate
computed the same wrong way (33rd session: with ``kernel.checks.valid_rows``' clamp removed the gate passed, the
harness skipping the checks of the rows it too thought absent)."""

from __future__ import annotations


def shard_rows(M: int, world_size: int) -> int:
    """S = ceil(M / W): the rows of every rank's shard, padding included."""
    return -(-M // world_size)


def valid_rows(M: int, world_size: int, rank: int) -> int:
    """How many of ``rank``'s S shard rows are real tokens (0 for a rank past the last token)."""
    S = shard_rows(M, world_size)
    return max(0, min(S, M - rank * S))
