"""Which protocol's kernel a call of the fused implementation runs: :class:`ProtocolPlan`, fixed at construction.

``pull`` and ``push`` name one kernel each. ``auto`` names a table ``{M: protocol}`` (``protocol_by_m=``, else
the one :mod:`kernel.fused.crossover` measured for this (N, K, W)): a call with M rows runs the protocol of the
largest table M <= M (of the smallest table M below them all; :func:`kernel.fused.crossover.protocol_for`).
That is a pure function of M and of the plan -- no host state a CUDA-graph replay would not reproduce -- so
every rank of a group and every replay of a captured graph runs the same kernel. The plan compiles only the
protocols its table names; with no table, or at W == 1 (the fused operation is then the plain GEMM), the
default protocol alone. Both kernels of an ``auto`` plan share one workspace (the wrapper's design record says
why that is safe).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import DEFAULT_PROTOCOL, KERNEL_PROTOCOLS, check_protocol


def checked_by_m(by_m) -> dict[int, str] | None:
    """``protocol_by_m=`` as ``{int M: "pull" | "push"}`` (None stays None); ``ValueError`` for anything else."""
    if by_m is None:
        return None
    table = {int(m): p for m, p in dict(by_m).items()}
    if not table or any(p not in KERNEL_PROTOCOLS for p in table.values()) or min(table) < 1:
        raise ValueError(f"protocol_by_m must map Ms >= 1 to one of {list(KERNEL_PROTOCOLS)}, got {by_m!r}")
    return table


@dataclass(frozen=True)
class ProtocolPlan:
    """The protocol (``pull``, ``push`` or ``auto``), the world size and, for ``auto``, the table as sorted
    ``(M, protocol)`` pairs (immutable: nothing changes it after construction)."""

    protocol: str
    world_size: int
    by_m: tuple[tuple[int, str], ...] = ()

    @classmethod
    def of(cls, protocol: str, world_size: int, by_m: dict | None = None) -> ProtocolPlan:
        """The plan of ``protocol``; ``by_m`` (``auto`` only) is validated by :func:`checked_by_m`."""
        check_protocol(protocol)
        table = checked_by_m(by_m)
        if table is not None and protocol != "auto":
            raise ValueError("protocol_by_m is the auto protocol's table")
        return cls(protocol, world_size, tuple(sorted((table or {}).items())))

    def table(self) -> dict[int, str] | None:
        """The ``auto`` table as ``{M: protocol}``; None when there is none."""
        return dict(self.by_m) or None

    def kernel_protocols(self) -> tuple[str, ...]:
        """The protocols whose kernels are compiled, in :data:`KERNEL_PROTOCOLS` order."""
        if self.protocol != "auto":
            return (self.protocol,)
        if self.world_size == 1 or not self.by_m:
            return (DEFAULT_PROTOCOL,)
        named = {p for _, p in self.by_m}
        return tuple(p for p in KERNEL_PROTOCOLS if p in named)

    def for_m(self, M: int) -> str:
        """The protocol of the kernel a call with M rows runs."""
        protocols = self.kernel_protocols()
        if len(protocols) == 1:
            return protocols[0]
        from .crossover import protocol_for

        return protocol_for(M, dict(self.by_m))


__all__ = ["ProtocolPlan", "checked_by_m"]
