"""A rank's long-lived state for running cases: its TP group, device, implementation instances, inputs
rebuilt from a case's seed, synchronisation, and the one door every valid implementation call of a case
goes through (:meth:`RankContext.call`, see :mod:`fuzz.families.calls`).

A :class:`RankContext` is always *on* one TP group: ``rank``, ``world_size`` and ``group`` are the group
rank, the group size and the process group every call, oracle and check of the context uses. The pool's
context is on the world (``group`` None); :meth:`RankContext.on_group` gives a view of the same rank on a
subgroup of a case's layout (:mod:`fuzz.layouts`) — same device, same instance cache, same case ledger,
inputs drawn for that group's DP replica. Subgroups are created collectively (``dist.new_group``, every
world rank, the layout's order) once per pool and kept (creating gloo groups costs time)."""

from __future__ import annotations

import contextlib
import copy
import gc
import time
import traceback
from dataclasses import dataclass, field

import torch

from oracle import make_w, make_x, reference_gemm_rs, seeded_shard_truth
from properties.dispatch import kernel_paths_agree_across_ranks

from .. import phases
from ..case import Case
from ..layouts import Layout, check_layout, replica_seed
from .calls import CaseCalls, raised_by_call


@dataclass(frozen=True)
class TpGroup:
    """One TP group of a layout as this rank sees it: its world ranks (group rank = position), its index
    in the layout (the DP replica) and the process group (None: the world)."""

    members: tuple[int, ...]
    index: int
    handle: object = None


#: Cases a rank's instances live for before they are all closed (see :meth:`RankContext.begin_case`).
INSTANCE_LIFETIME_CASES = 16


@dataclass
class _Shared:
    """What every view of one rank shares: instances, process groups, the running case's ledger."""

    impls: dict = field(default_factory=dict)      # (group members, max_M, N, K) -> instance
    cases: int = 0                                 # cases begun on this rank (the same count on every rank)
    groups: dict = field(default_factory=dict)     # group members -> process group (every layout's groups)
    sync_group: object = None                      # the harness's own world-wide gloo group (sync_world)
    calls: CaseCalls | None = None


class RankContext:
    """Implementation instances are keyed by (group, shape), so cases that follow each other in one pool
    alternate M on the same instance (as in serving)."""

    def __init__(self, impl_factory, *, rank: int, world_size: int, device: torch.device, group=None,
                 topology: str = "cpu"):
        self.impl_factory = impl_factory
        self.rank, self.world_size, self.device, self.group = rank, world_size, device, group
        self.topology = topology
        self.world_rank, self.pool_world_size = rank, world_size
        self.tp = TpGroup(tuple(range(world_size)), 0, group)
        self._shared = _Shared()  # one per rank: every group view of this rank holds the same

    @property
    def _impls(self) -> dict[tuple, object]:
        return self._shared.impls

    @property
    def calls(self) -> CaseCalls | None:
        return self._shared.calls

    def began(self, tag: str, M: int, how: str) -> None:
        """A direct call of the implementation into this case's trail (:meth:`CaseCalls.began`); nothing outside a
        case (a unit test's context, no ledger yet)."""
        if self._shared.calls is not None:
            self._shared.calls.began(tag, M, how)

    # groups ---------------------------------------------------------------------------------
    @property
    def on_world(self) -> bool:
        return self.tp.handle is None and len(self.tp.members) == self.pool_world_size

    def create_groups(self, layout: Layout | None) -> None:
        """The process group of every group of ``layout``, created on first use and kept: every world rank
        calls ``dist.new_group`` for every group not made yet, in the layout's order (a collective)."""
        check_layout(layout, self.pool_world_size)
        import torch.distributed as dist

        groups = self._shared.groups
        for members in layout or []:
            if tuple(members) not in groups:
                groups[tuple(members)] = dist.new_group(list(members))

    def on_group(self, members, index: int) -> RankContext:
        """This rank as group rank ``members.index(world_rank)`` of the TP group ``members`` (created by
        :meth:`create_groups`), DP replica ``index``: a view sharing the instance cache and the ledger."""
        key = tuple(members)
        if key not in self._shared.groups:
            raise RuntimeError(f"group {list(key)} was not created (create_groups first)")
        if self.world_rank not in key:
            raise RuntimeError(f"world rank {self.world_rank} is not in group {list(key)}")
        view = copy.copy(self)
        handle = self._shared.groups[key]
        view.tp = TpGroup(key, index, handle)
        view.rank, view.world_size, view.group = key.index(self.world_rank), len(key), handle
        return view

    def world(self) -> RankContext:
        """This rank on the whole world (the view every layout case ends with)."""
        if self.on_world:
            return self
        view = copy.copy(self)
        view.tp = TpGroup(tuple(range(self.pool_world_size)), 0, None)
        view.rank, view.world_size, view.group = self.world_rank, self.pool_world_size, None
        return view

    def gather(self, answer) -> dict[int, object]:
        """group rank -> ``answer`` of every rank of this context's group (one ``all_gather_object``)."""
        import torch.distributed as dist

        if self.world_size == 1 or not dist.is_initialized():
            return {self.rank: answer}
        out: list = [None] * self.world_size
        dist.all_gather_object(out, answer, group=self.group)
        return dict(enumerate(out))

    def sync_world(self) -> None:
        """Every world rank here, on the harness's own gloo group (not the default group an implementation
        may use: an implementation's stray collective on the world group can never pair with it)."""
        if self.pool_world_size == 1:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        if self._shared.sync_group is None:
            self._shared.sync_group = dist.new_group(backend="gloo")
        self.sync()
        dist.barrier(group=self._shared.sync_group)

    # instances ------------------------------------------------------------------------------
    def impl(self, case: Case):
        """This group's long-lived instance of the case's (max_M, N, K), built under the case's caller defaults
        (``Case.defaults``: an engine's instance is built under its defaults, so it is another instance)."""
        max_M, N, K = case.max_M, case.N, case.K
        key = (self.tp.members, max_M, N, K, case.defaults or "")
        if key not in self._impls:
            self._impls[key] = self.new_impl(max_M, N, K)
        return self._impls[key]

    def fresh_impl(self, case: Case):
        return self.new_impl(case.max_M, case.N, case.K)

    def new_impl(self, max_M: int, N: int, K: int):
        """A new instance on this context's group (construction is collective on the group); its path table
        compared across the group's ranks (:meth:`paths_agree`); what the construction changed of the caller's
        process noted for ``ambient_state_kept`` (:meth:`CaseCalls.ambient_kept`)."""
        with phases.phase("construct"):
            if self.calls is None:
                impl = self.impl_factory(self.group, max_M=max_M, N=N, K=K, device=self.device)
            else:
                with self.calls.construction(f"construction max_M={max_M} N={N} K={K}", self.device):
                    impl = self.impl_factory(self.group, max_M=max_M, N=N, K=K, device=self.device)
            self.paths_agree(impl, f"instance max_M={max_M} N={N} K={K} on group {list(self.tp.members)}")
        return impl

    def paths_agree(self, impl, what: str) -> None:
        """Where the implementation states which code path a call of each M runs (``path_table()``), every rank
        of the group's table gathered (one collective, beside the construction's) and compared:
        ``kernel_paths_agree_across_ranks`` into the case's checks. Ranks holding different tables launch
        different kernels for the same call, which wait for each other until a timeout (seen at W = 8 on one
        H200, 13th session); compared here, every M is covered at construction, not only the Ms called."""
        if self.world_size == 1 or self.calls is None or not states_paths(impl):
            return
        table = getattr(impl, "path_table", None)
        try:
            mine = table() if callable(table) else None
        except Exception as exc:  # noqa: BLE001 -- still gathered: the peers must not wait for this rank
            mine = f"path_table() raised {type(exc).__name__}: {exc}"
        tables = self.gather(mine)
        if all(t is None for t in tables.values()):
            return
        check = kernel_paths_agree_across_ranks(tables, what=what, rank=self.rank)
        check.extra.setdefault("call", "construction")
        self.calls.checks.append(check)

    def held_impls(self, *, besides: tuple[int, ...] | None = None) -> dict[str, object]:
        """label -> every long-lived instance this rank holds, on any group but ``besides`` (members)."""
        return {f"instance group={list(g)} max_M={m} N={n} K={k}" + (f" built under {d} defaults" if d else ""): impl
                for (g, m, n, k, d), impl in self._impls.items() if g != besides}

    @property
    def on_cuda(self) -> bool:
        """Whether this rank's device has CUDA streams and graphs: the graph and streams families run only there
        (tests/foundation/_fake_cuda.py stands a CPU model of both in, to see those families' checks fail)."""
        return self.device.type == "cuda"

    def close(self) -> None:
        """Close every held instance, in the order of their keys: closing is collective on an instance's group,
        and one global order over every rank's subset of the groups cannot deadlock."""
        for key in sorted(self._impls):
            close_impl(self._impls[key])
        self._impls.clear()
        if self.device.type == "cuda":
            # garbage of the closed instances (reference cycles of an implementation's or of the harness's
            # objects holding symmetric memory) freed now, between cases: a collector pass that frees it later
            # may run inside a CUDA-graph capture, where torch's symmetric-memory destructor aborts the process
            # (kernel/fused/workspace.py, SymmetricWorkspace.close)
            gc.collect()
            torch.cuda.empty_cache()  # the freed workspaces go back to the GPU the other pools share

    # the checked call --------------------------------------------------------------------------
    def begin_case(self) -> CaseCalls:
        """A new ledger of this case's calls (results held, per-call checks), shared by this rank's group
        views of the case. Every :data:`INSTANCE_LIFETIME_CASES` cases the held instances are closed first
        (every rank of the pool counts the same cases, so they all close at the same case): long-lived enough
        to alternate M across cases as a server does, short-lived enough that a pool's instances of every
        shape drawn do not fill the GPU the other pools share (seen on an H200: out of memory with 4 pools
        per GPU after a few hundred cases)."""
        self._shared.cases += 1
        if self._shared.cases % INSTANCE_LIFETIME_CASES == 0:
            self.close()
        self._shared.calls = CaseCalls(self.rank, self.world_size)
        return self._shared.calls

    def call(self, impl, x, w, out=None, *, tag: str, captured: bool = False, hold: bool = True):
        """One valid call of ``impl`` through this case's ledger: returns the result (a conforming stand-in
        if the result broke the result contract) and records the per-call checks with this context's group
        rank and size. See :meth:`fuzz.families.calls.CaseCalls.call`."""
        if self.calls is None:
            raise RuntimeError("RankContext.call outside a case (run_case begins one)")
        with phases.phase("calls"):
            return self.calls.call(impl, x, w, out, tag=tag, captured=captured, hold=hold, rank=self.rank,
                                   world_size=self.world_size)

    def reference(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The oracle's shard of this group's call (:func:`oracle.reference_gemm_rs`), timed as ``oracle``."""
        with phases.phase("oracle"):
            return reference_gemm_rs(x, w, self.group)

    @contextlib.contextmanager
    def capture(self, graph, *, tag: str, M: int):
        """``torch.cuda.graph(graph)`` around the implementation's captured call(s) and nothing else of the
        harness: a capture that fails when it ends is the implementation's failure (a failed
        ``call_raised``, :class:`~fuzz.families.calls.CallRaised`), not an error of the harness."""
        try:
            with torch.cuda.graph(graph):
                yield
        except Exception as exc:
            if raised_by_call(exc):
                raise
            raise self.calls.capture_failed(exc, tag=tag, M=M, rank=self.rank) from exc

    # inputs ---------------------------------------------------------------------------------
    def input_seed(self, seed: int) -> int:
        """The seed this group's replica draws inputs with (:func:`fuzz.layouts.replica_seed`)."""
        return replica_seed(seed, self.tp.index)

    def x(self, case: Case, seed: int, M: int, kind: str | None = None, *, K: int | None = None) -> torch.Tensor:
        with phases.phase("inputs"):
            return offset_view(make_x(self.input_seed(seed), self.rank, M, K or case.K, self.world_size,
                                      kind or case.kind, device=self.device), case.offset, self.device)

    def w(self, case: Case, seed: int, kind: str | None = None, *, N: int | None = None,
          K: int | None = None) -> torch.Tensor:
        with phases.phase("inputs"):
            return offset_view(make_w(self.input_seed(seed), self.rank, N or case.N, K or case.K,
                                      self.world_size, kind or case.kind, device=self.device), case.offset,
                               self.device)

    def truth(self, case: Case, seed: int, M: int, kind: str | None = None, *, N: int | None = None,
              K: int | None = None):
        dev = self.device if self.device.type == "cuda" else "cpu"
        with phases.phase("truth"):
            return seeded_shard_truth(self.input_seed(seed), kind or case.kind, self.rank, M, N or case.N,
                                      K or case.K, self.world_size, device=dev)

    def rounding_model(self, case: Case, seed: int, M: int, kind: str | None = None):
        """What :func:`properties.bias.no_systematic_bias` needs for this rank's shard of a call at M."""
        from properties.bias import seeded_rounding_model

        dev = self.device if self.device.type == "cuda" else "cpu"
        with phases.phase("truth"):
            return seeded_rounding_model(self.input_seed(seed), kind or case.kind, self.rank, M, case.N, case.K,
                                         self.world_size, device=dev)

    # synchronisation ----------------------------------------------------------------------------
    def sync(self) -> None:
        """Wait for this rank's device: charged to ``calls`` (what the families wait for here is the work their
        calls queued -- on shared-gpu, the kernels time-slicing with the peers' -- so the case's phases show it
        as the implementation's time, not the checks')."""
        if self.device.type == "cuda":
            with phases.phase("calls"):
                torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """All ranks of this context's group here (e.g. after a rejected call's before/after comparison,
        before anyone's next call writes into peers' flag areas)."""
        self.sync()
        if torch.distributed.is_initialized() and self.world_size > 1:
            torch.distributed.barrier(group=self.group)

    def delay(self, delay_ms: int) -> None:
        """This rank arrives late by ``delay_ms`` (on the GPU stream where there is one)."""
        if self.device.type == "cuda":
            torch.cuda._sleep(int(delay_ms * 1.5e6))  # ~1.5 GHz: cycles for delay_ms on the GPU stream
        else:
            time.sleep(delay_ms / 1000)


#: The value the head of an offset view's buffer holds (before the view's storage offset): finite, unlike
#: any input row, so reading it instead of the operand gives a wrong value, not a NaN another check sees.
OFFSET_HEAD_VALUE = 3.0
#: Storage offsets must keep a view 16-byte aligned (the contract's alignment): multiples of 8 bf16 elements.
OFFSET_ALIGN = 8
#: Rows of the buffer after an offset view's data (OFFSET_HEAD_VALUE too): the caller's next tensor in a packed
#: buffer, where a kernel that pads x to its tile or shard rows in place (the storage has room) would write.
OFFSET_TAIL_ROWS = 16


def offset_view(t: torch.Tensor, offset: int, device) -> torch.Tensor:
    """``t`` on ``device``, as a contiguous view starting ``offset`` elements into a larger buffer (``offset``
    0: a plain tensor). The head and a tail of OFFSET_TAIL_ROWS rows hold OFFSET_HEAD_VALUE; a call's
    ``inputs_untouched`` compares the whole buffer (``fuzz.families.calls.watch_inputs``)."""
    if not offset:
        return t.to(device)
    if offset % OFFSET_ALIGN or offset < 0:
        raise ValueError(f"offset {offset} must be a non-negative multiple of {OFFSET_ALIGN} (16-byte aligned views)")
    tail = OFFSET_TAIL_ROWS * (t.shape[-1] if t.dim() else 1)
    buf = torch.full((offset + t.numel() + tail,), OFFSET_HEAD_VALUE, dtype=t.dtype, device=device)
    view = buf[offset : offset + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def waiver(impl, clause: str) -> str | None:
    """The reason ``impl`` gives for not offering a contract clause (kernel.interface.CLAUSES), or None."""
    return getattr(impl, "waived_clauses", {}).get(clause)


def aligned_if_waived(impl, M: int, W: int, max_M: int | None = None) -> int:
    """M itself, or (for an implementation that waives unaligned M) the next multiple of W — the one below
    where that would pass ``max_M``: a bad call, a capacity case or a graph must be tested at an M the
    implementation takes, so a rejection is for what the case tests."""
    if not waiver(impl, "unaligned_m") or M % W == 0:
        return M
    up = M + (-M) % W
    return up if max_M is None or up <= max_M else M - M % W


def close_impl(impl) -> None:
    close = getattr(impl, "close", None)
    if close is not None:
        close()


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def states_paths(impl) -> bool:
    """Whether ``impl``'s class overrides :meth:`kernel.interface.GemmRsImplementation.path_table` (whose answer is
    None: no claim). The same on every rank (one implementation per pool), so ranks skip the gather together: a
    collective per construction costs where nothing is claimed (the cpu topology's W = 8 pools on 2 cores)."""
    from kernel.interface import GemmRsImplementation

    own = getattr(type(impl), "path_table", None)
    return callable(own) and own is not GemmRsImplementation.path_table
