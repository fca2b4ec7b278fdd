"""The implementation interface every GEMM-RS under the gate provides (CONTRACT.md).

An implementation is built once for a group and a capacity, then called many times::

    impl = SomeGemmRs(group, max_M=8192, N=7168, K=2048, device=torch.device("cuda", 0))
    SomeGemmRs.supports(N, K)      # Eligibility: does the main path take these shapes (tails included)?
    ok = impl.can_run(w)           # Eligibility: truthy, with .reason when not
    impl.should_run(x)             # does the fused path pay for this M?
    shard = impl(x, w, out=None)   # (ceil(M / W), N) bf16: this rank's rows of sum_r x_r @ w_r.T
    impl.last_path                 # which path ran: "fused", "unfused", ...

Paths (CONTRACT.md, "Path"): a verdict on an implementation is a verdict on its own path.
:attr:`~GemmRsImplementation.main_path` names that path as ``last_path`` reports it;
:meth:`~GemmRsImplementation.main_path_support` says whether this host can build it at all (device,
capability, libraries); :meth:`~GemmRsImplementation.expected_path` says which path the contract has serve
a call: the main path where ``can_run`` says yes, else the declared :attr:`~GemmRsImplementation.fallback_path`
with ``can_run``'s reason. The gate fails a call whose ``last_path`` is anything else (a silent fallback).

Third-party kernels join the gate through an adapter that subclasses :class:`GemmRsImplementation`
and declares in :attr:`waived_clauses` the contract clauses it legitimately does not offer (each with
its reason); the suite then reports those clauses as skipped with that reason, never as passed.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .checks import check_operands, shard_rows, valid_rows


@dataclass(frozen=True)
class Eligibility:
    """Answer of ``can_run``: truthy when the fused path supports the weight and group."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


#: Contract clauses an adapter may waive (``waived_clauses`` keys). The suite knows each by name and
#: honours each waiver (the clause's checks are reported as skipped with the reason, never passed).
CLAUSES = (
    "out_param",        # accepts out= and writes only its valid rows
    "graph_capture",    # CUDA-graph capturable and replayable
    "unaligned_m",      # any M in 1..max_M, not only multiples of W or of a tile
    "capacity_check",   # rejects M > max_M / M <= 0 with a ValueError subclass before any work
    "typed_errors",     # rejects bad calls with this suite's typed errors (kernel/errors.py), not any exception
    "batch_invariant",  # a token row's bits depend on neither M nor its row (non-exact inputs; exact: never waived)
)


@dataclass(frozen=True)
class KernelPath:
    """One code path of an implementation's main path (a tile config, a split-K build, ...) and a call that
    takes it: an instance for (N, K) called with M rows at group size ``world_size``. ``replay``: the gate also
    replays it in a CUDA graph -- a path that keeps device state of its own across calls (flags, buffers), or whose
    launch has a form the capture must keep (the fused kernel's thread-block clusters)."""

    label: str
    N: int
    K: int
    M: int
    replay: bool = False


class GemmRsImplementation(abc.ABC):
    """Base of every implementation and adapter. Subclasses implement :meth:`_run`."""

    name: str = "abstract"
    #: the path this implementation is gated on, as ``last_path`` reports it; a subclass that sets
    #: neither this nor a parent's gets its ``name`` (see ``__init_subclass__``)
    main_path: str | None = None
    #: the path a call takes where ``can_run`` says no (None: no fallback; such a call must not run)
    fallback_path: str | None = None
    #: torch ops (overload packets, e.g. ``"aten.mm"``) only the fallback's work dispatches: a call that reports
    #: the main path yet dispatched one ran the fallback under the main path's name (a lying ``last_path``; the
    #: gate's ``path_taken`` sees the ops through a ``TorchDispatchMode``). Empty: not checked (a main path made of
    #: torch ops has no such signature).
    fallback_ops: tuple[str, ...] = ()
    #: world sizes this implementation supports; others raise UnsupportedConfigError at construction
    supported_world_sizes: range | tuple[int, ...] = range(1, 1 << 16)
    #: clause name -> reason, for clauses of CLAUSES this implementation does not offer
    waived_clauses: dict[str, str] = {}
    #: M from which the fused path pays (CONTRACT.md: default 128)
    should_run_min_m: int = 128
    #: modules a harness may import ahead, in the background, while its ranks start (heavy imports the
    #: implementation would do lazily at its first construction, e.g. a kernel DSL); none by default
    preload_modules: tuple[str, ...] = ()
    #: width in bits of the call counter the implementation keeps on the device (epochs its flags compare), for
    #: CONTRACT.md's counter clause: None -- it keeps none the gate can advance (``advance_call_counter``)
    call_counter_bits: int | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        unknown = set(cls.waived_clauses) - set(CLAUSES)
        if unknown:  # a misspelt waiver would silently waive nothing
            raise TypeError(f"{cls.__name__}.waived_clauses names unknown clause(s) {sorted(unknown)}; "
                            f"known: {CLAUSES}")
        if cls.main_path is None:
            cls.main_path = cls.name

    def __init__(self, group=None, *, max_M: int, N: int, K: int, device: torch.device | str | None = None):
        from .checks import check_world_size

        self.group = group
        if dist.is_available() and dist.is_initialized():
            self.world_size = dist.get_world_size(group)
            self.rank = dist.get_rank(group)
        else:
            self.world_size, self.rank = 1, 0
        check_world_size(self.world_size, self.supported_world_sizes)
        if max_M <= 0 or N <= 0 or K <= 0:
            from .errors import UnsupportedConfigError

            raise UnsupportedConfigError(f"max_M, N, K must be positive, got {max_M}, {N}, {K}")
        self.max_M, self.N, self.K = int(max_M), int(N), int(K)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.last_path: str | None = None

    # --- contract -------------------------------------------------------------------------------
    def main_path_support(self) -> Eligibility:
        """Whether this host can build the main path at all (device type and capability, libraries). When
        not, every verdict on this implementation is a FAIL with the reason: its own path never runs."""
        return Eligibility(True)

    @classmethod
    def supports(cls, N: int, K: int) -> Eligibility:
        """Whether the main path computes every call of an instance built for (N, K) — tails included — on a
        host and group where it runs at all (CONTRACT.md, "Shapes"). A query on the class: the gate draws
        its shapes from it before any instance exists. Where it says no, an instance must reject the shape
        with a typed error (construction raising :class:`~kernel.errors.UnsupportedConfigError`, or every
        call where there is no fallback) or ``can_run`` must say no and the call take the fallback.
        Default: every N, K >= 1."""
        if N < 1 or K < 1:
            return Eligibility(False, f"N={N}, K={K}: both must be >= 1")
        return Eligibility(True)

    @classmethod
    def supports_group(cls, world_size: int) -> Eligibility | None:
        """Whether the main path serves a TP group of ``world_size`` ranks on a host where it runs at all (a query
        on the class, like :meth:`supports`). Where both say yes, every valid call of an instance must run the
        main path -- ``can_run`` saying no there, or the construction raising
        :class:`~kernel.errors.UnsupportedConfigError`, is a fallback or a refusal the implementation declared it
        would not need: ``declared_config_served`` fails (a silent fallback is no pass). None (the default): no
        claim about groups, so the gate cannot tell a group ``can_run`` declines from a silent fallback and holds
        nothing to it."""
        return None

    @classmethod
    def declared_paths(cls, world_size: int) -> tuple[KernelPath, ...]:
        """The distinct code paths of the main path at group size ``world_size``, each with a call that takes it
        (a query on the class, like :meth:`supports`): the gate runs every one of them on exact, cancellation
        and gaussian inputs in every run (``fuzz/test_gemm_rs.py::test_kernel_paths``), so a path that only
        rare shapes select is never left to chance. Default: none declared."""
        return ()

    def path_table(self) -> tuple[tuple[int, str], ...] | None:
        """Which code path of the main path a call of M rows (1 <= M <= max_M) runs, as pieces ``(first M,
        path name)`` in increasing M, each running to the next piece's first M: a pure function of M and of what
        the instance fixed at construction. Every rank of the group must hold the same table -- ranks that run
        different kernels for one call wait for each other's signals forever (the gate gathers the tables of
        every instance it builds: ``kernel_paths_agree_across_ranks``). None (the default): no claim, one path
        or none it names."""
        return None

    def can_run(self, weight: torch.Tensor) -> Eligibility:
        """Whether this implementation's main path supports ``weight`` and the group."""
        return Eligibility(True)

    def expected_path(self, x: torch.Tensor, w: torch.Tensor) -> tuple[str | None, str]:
        """(path, reason): the path the contract has serve this call, as ``last_path`` names it. The main
        path where ``can_run(w)`` says yes (reason ""); else the declared fallback with ``can_run``'s reason;
        None when there is no fallback (no path serves the call). Metadata only."""
        ok = self.can_run(w)
        if ok:
            return self.main_path, ""
        return self.fallback_path, ok.reason or "can_run gave no reason"

    def should_run(self, x: torch.Tensor) -> bool:
        """Whether the main path pays for this M (a call that ignores this is still correct)."""
        return int(x.shape[0]) >= self.should_run_min_m

    def __call__(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        M = self.validate(x, w, out)
        return self._run(x, w, out, M)

    def validate(self, x, w, out) -> int:
        """Every bad-call check, metadata only; returns M. Subclasses may add checks."""
        return check_operands(
            x, w, out, N=self.N, K=self.K, max_M=self.max_M, world_size=self.world_size, device=self.device
        )

    @abc.abstractmethod
    def _run(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None, M: int) -> torch.Tensor:
        """Compute this rank's shard; operands are already validated."""

    # --- helpers ----------------------------------------------------------------------------------
    def shard_rows(self, M: int) -> int:
        return shard_rows(M, self.world_size)

    def valid_rows(self, M: int) -> int:
        return valid_rows(M, self.world_size, self.rank)

    def fresh_result(self, M: int) -> torch.Tensor:
        """A new (S, N) bf16 result for a call without ``out=``: its padding rows +0.0 (CONTRACT.md, "Result"), its
        valid rows left for the call to write -- no fill of the whole shard: at W = 1 and on every rank whose rows
        are all valid none at all (a memset of S x N x 2 bytes was ~10 % of a W = 1 call at M = N = 8192, K = 2048
        on one H200: 40 us beside a 364 us GEMM, 26th session). Safe under CUDA-graph capture (M is fixed there)."""
        S = self.shard_rows(M)
        out = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        n_valid = min(max(self.valid_rows(M), 0), S)
        if n_valid < S:
            out[n_valid:].zero_()
        return out

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Internal buffers a rejected call must leave bit-identical (workspaces, flags)."""
        return {}

    def guard_regions(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """name -> (current words, expected words) of red zones after workspaces and flag areas."""
        return {}

    def call_counter(self) -> int | None:
        """This rank's call counter as the implementation keeps it (``call_counter_bits`` wide), or None where this
        instance keeps none (a path without flags). Reads the device: between calls only."""
        return None

    def advance_call_counter(self, calls: int) -> None:
        """As if ``calls`` more calls had completed on every rank of the group, with nothing else done: every
        counter and every flag word holding a counter value moves on by ``calls`` (a word never written stays
        never written), so a test reaches the counter's wrap (2^31, 2^32 calls) in a few calls. Collective:
        every rank of the group calls it with the same ``calls``, no call in flight."""
        raise NotImplementedError(f"{type(self).__name__} keeps no call counter (call_counter_bits is None)")

    def close(self) -> None:
        """Release workspaces (symmetric memory, compiled kernels). Idempotent."""
        return None

    def describe(self) -> dict:
        return {"name": self.name, "world_size": self.world_size, "max_M": self.max_M, "N": self.N, "K": self.K}
