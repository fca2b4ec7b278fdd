"""The symmetric workspace of the fused GEMM-RS: partials, flags and red zones, one allocation per rank.

Layout of each rank's symmetric buffer (bytes; every section 128-byte aligned)::

    [ partials: W*S_max rows x N bf16 ][ guard A ][ flags: u32 words ][ guard B ]

* partials -- pull protocol: this rank's bf16 GEMM partial ``x_r @ w_r.T`` (rows 0..M-1 of a call); peers
  read it. Push protocol: this rank's inbox, W slots of ``S_max`` rows; slot ``src`` receives rank src's
  partial of this rank's shard (peers write it, this rank reads it).
* guard A  -- red zone right after the partials (fixed int16 pattern, never written).
* flags    -- u32 words (layout constants in :mod:`kernel.fused.config`; semantics in
  :mod:`kernel.fused.rs_protocol` and the two kernels' design records):
  ``EPOCH_WORD`` (completed calls of this rank), ``FINISHED_WORD`` (CTAs done in the running call),
  ``DEVICE_WORD`` (an id of this rank's GPU, written at construction, read by the hosts of the group:
  :meth:`SymmetricWorkspace.ranks_share_a_gpu`),
  ``DONE_BASE + p`` (last epoch in which rank p finished reading: pull, this rank's partials; push, its inbox),
  ``READY_BASE + src * slots + tile`` (epoch in which rank ``src``'s partial of ``tile`` is stored).
* guard B  -- red zone right after the flags.

Construction is collective (every rank of the group, same order): flags zeroed and guards filled and
the device synchronised *before* ``rendezvous``, so no peer can signal a flag that is zeroed later.
Needs only torch (no CuTe DSL): the layout constants are shared with the kernel.
"""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist

from .config import DEVICE_WORD, DONE_BASE, EPOCH_WORD, FINISHED_WORD, MAX_WORLD_SIZE, READY_BASE

GUARD_BYTES = 4096
ALIGN = 128


def _round_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def guard_words(n: int, device, salt: int = 0) -> torch.Tensor:
    """A fixed, irregular int16 pattern for red zones (not a plausible bf16 row, nor zeros)."""
    idx = torch.arange(n, dtype=torch.int32, device=device) + salt  # built where it is used: no copy, no wait
    return ((idx * 40503 + 12345) % 65536 - 32768).to(torch.int16)


def tile_slots(max_M: int, N: int, tiles_mn: list[tuple[int, int]]) -> int:
    """Ready-flag slots per source rank: the most (m_tile, n_tile) tiles any config has at max_M."""
    return max(-(-max_M // tm) * -(-N // tn) for tm, tn in tiles_mn)


def device_id(device) -> int:
    """A 31-bit id of the physical GPU behind ``device`` (from its UUID, else its PCI location): equal for
    ranks that share a GPU, different (up to a 2^-31 collision) for ranks on different GPUs."""
    props = torch.cuda.get_device_properties(device)
    name = str(getattr(props, "uuid", "") or "")
    if not name:
        name = "pci:{}:{}:{}".format(*(getattr(props, f, "?") for f in ("pci_domain_id", "pci_bus_id",
                                                                         "pci_device_id")))
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def use_cuda_backend(device) -> None:
    """Symmetric memory from peer-mapped cuMem allocations (no NVSHMEM, no NVLS), unless a backend was
    already chosen in this process (then it stays: torch fixes it at the first allocation)."""
    from torch.distributed import _symmetric_memory as symm_mem

    try:
        if symm_mem.get_backend(device) is None:
            symm_mem.set_backend("CUDA")
    except Exception:  # noqa: BLE001, S110 -- older torch, or a backend set elsewhere first: keep it
        pass


#: Symmetric-memory rendezvous this process made through this module (:func:`align_rendezvous_counts`): the
#: workspaces' and the catch-up ones.
_RENDEZVOUS_MADE = [0]
#: This process's one-rank process group (gloo), made on the first catch-up and kept.
_SOLO_GROUP: list = [None]


def _solo_group():
    """A process group of this rank alone: created by this rank only (``use_local_synchronization``: no other
    rank takes part, the world's group numbering is untouched), once per process."""
    if _SOLO_GROUP[0] is None:
        _SOLO_GROUP[0] = dist.new_group([dist.get_rank()], backend="gloo", use_local_synchronization=True,
                                        group_desc="gemm-rs-solo")
    return _SOLO_GROUP[0]


def _solo_rendezvous(device) -> None:
    """One rendezvous of a fresh one-byte symmetric buffer on this rank's one-rank group: it advances torch's
    per-process exchange counter as any rendezvous does, without waiting for anyone (a group of one)."""
    from torch.distributed import _symmetric_memory as symm_mem

    use_cuda_backend(device)
    symm_mem.rendezvous(symm_mem.empty(1, dtype=torch.uint8, device=device), _solo_group())


def _gather(value: int, group) -> list:
    made: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(made, value, group=group)
    return made


def align_rendezvous_counts(group, device) -> int:
    """Bring this group's ranks to the same count of symmetric-memory rendezvous before the next one; return how
    many catch-up rendezvous this rank made. Raise :class:`kernel.errors.SymmetricMemoryMismatch` on every rank
    of the group when a rank could not catch up -- never the hang that would follow.

    Why: torch's CUDA symmetric memory exchanges rendezvous metadata through the group's store under keys
    numbered by a counter of the *process* (``StoreExchange::seq_id_``, torch/csrc/distributed/c10d/symm_mem/
    CUDASymmetricMemoryUtils.hpp, 2.11; pytorch/pytorch#196082, a fix proposed in #196350): every rendezvous on
    any group advances it. After an instance on a subgroup that some ranks of a later group were not in (ranks 1
    and 3 of 4, say), the later rendezvous of a group spanning both waited forever for keys nobody writes (gate
    HANGs on an H200, every rank in ``rendezvous``). So: the group's ranks compare their counts (one
    ``all_gather_object`` on the group, gloo or NCCL, collective like the construction it precedes); a rank
    behind makes the missing rendezvous on a group of itself alone (:func:`_solo_rendezvous`, no waiting), and
    only if some rank was behind, the ranks compare again.
    Counted: this module's rendezvous only (another library's symmetric memory in the same process, such as
    PyTorch async-TP's workspace, is invisible here), each assumed to make the same number of store exchanges
    -- true without multicast, which this kernel never uses (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    made = _gather(_RENDEZVOUS_MADE[0], group)
    target = max(made)
    if min(made) == target:
        return 0
    behind = target - _RENDEZVOUS_MADE[0]
    failure = None
    try:
        for _ in range(behind):
            _solo_rendezvous(device)
            _RENDEZVOUS_MADE[0] += 1
    except Exception as exc:  # noqa: BLE001 -- reported on every rank of the group below
        failure = f"{type(exc).__name__}: {exc}"
    after = _gather(_RENDEZVOUS_MADE[0] if failure is None else -1, group)
    if len(set(after)) > 1:
        from kernel.errors import SymmetricMemoryMismatch

        raise SymmetricMemoryMismatch(
            f"the ranks of this group made different numbers of symmetric-memory rendezvous before this one "
            f"(per group rank: {made}) and could not catch up (after: {after}; -1: that rank's catch-up failed"
            f"{'' if failure is None else ', here: ' + failure}): torch numbers its rendezvous store exchanges "
            f"per process, so this rendezvous would wait forever")
    return behind


class WorkspaceLayout:
    """Byte offsets of the sections for (W, max_M, N, slots)."""

    def __init__(self, world_size: int, max_M: int, N: int, slots: int):
        if world_size > MAX_WORLD_SIZE:
            raise ValueError(f"W={world_size} > {MAX_WORLD_SIZE}, the most ranks the flag area has done words for")
        self.world_size, self.N, self.slots = world_size, N, slots
        self.s_max = -(-max_M // world_size)
        self.partial_rows = world_size * self.s_max
        self.partials_bytes = _round_up(self.partial_rows * N * 2)
        self.guard_a = self.partials_bytes
        self.flags_off = self.guard_a + GUARD_BYTES
        self.flag_words = READY_BASE + world_size * slots
        self.flags_bytes = _round_up(self.flag_words * 4)
        self.guard_b = self.flags_off + self.flags_bytes
        self.total = self.guard_b + GUARD_BYTES


class SplitParts:
    """One rank's split-K buffers, in plain device memory (only this rank's kernel reads them; not symmetric):
    ``parts`` -- the fp32 K parts of up to ``units`` work units (``part_bytes`` in all), then ``guard`` (a red zone,
    fixed pattern, never written); ``ready`` -- two u32 words per unit: the epoch in which its part was stored, then
    (after a call's ``units`` part words) the epoch in which its slice of the tile's bf16 partial was stored
    (compared for equality, so words of earlier calls, or zeros, never satisfy a wait); at W == 1 also ``flags``,
    the epoch / finished / done words a split-K GEMM keeps (W > 1: those of the symmetric workspace)."""

    def __init__(self, part_bytes: int, units: int, device: torch.device, own_flags: bool):
        self.capacity_bytes, self.capacity_units = int(part_bytes), int(units)
        self.buf = torch.zeros(_round_up(part_bytes) + GUARD_BYTES, dtype=torch.uint8, device=device)
        self.parts = self.buf[:part_bytes]
        self.guard = self.buf[_round_up(part_bytes):].view(torch.int16)
        self.guard_expected = guard_words(self.guard.numel(), device, salt=3)
        self.guard.copy_(self.guard_expected)
        self.ready = torch.zeros(max(2 * units, 1), dtype=torch.int32, device=device)
        self.flags = torch.zeros(READY_BASE, dtype=torch.int32, device=device) if own_flags else None

    def check_fits(self, units: int, unit_bytes: int) -> None:
        """``ValueError`` unless ``units`` work units of ``unit_bytes`` fit (never a write past the parts)."""
        if units > self.capacity_units or units * unit_bytes > self.capacity_bytes:
            raise ValueError(f"split-K call of {units} units x {unit_bytes} bytes exceeds the parts workspace "
                             f"({self.capacity_units} units, {self.capacity_bytes} bytes)")

    def close(self) -> None:
        for name, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(self, name, None)


class SymmetricWorkspace:
    """One rank's symmetric buffer plus the peer pointers of every rank's buffer."""

    def __init__(self, layout: WorkspaceLayout, group, device: torch.device):
        from torch.distributed import _symmetric_memory as symm_mem

        self.layout = layout
        self.device = device
        use_cuda_backend(device)
        self.buf = symm_mem.empty(layout.total, dtype=torch.uint8, device=device)
        L = layout
        self.partials = self.buf[: L.partial_rows * L.N * 2].view(torch.bfloat16).view(L.partial_rows, L.N)
        self.guard_a = self.buf[L.guard_a : L.guard_a + GUARD_BYTES].view(torch.int16)
        self.flags = self.buf[L.flags_off : L.flags_off + L.flag_words * 4].view(torch.int32)
        self.guard_b = self.buf[L.guard_b : L.guard_b + GUARD_BYTES].view(torch.int16)
        self.guard_a_expected = guard_words(self.guard_a.numel(), device, salt=1)
        self.guard_b_expected = guard_words(self.guard_b.numel(), device, salt=2)
        self.buf.zero_()
        self.guard_a.copy_(self.guard_a_expected)
        self.guard_b.copy_(self.guard_b_expected)
        self.flags[DEVICE_WORD] = device_id(device)
        torch.cuda.synchronize(device)  # zeroed flags are in memory before any peer can see the buffer
        align_rendezvous_counts(group, device)
        self.handle = symm_mem.rendezvous(self.buf, group if group is not None else dist.group.WORLD)
        _RENDEZVOUS_MADE[0] += 1
        self.rank = int(self.handle.rank)
        base = [int(p) for p in self.handle.buffer_ptrs]
        self.partial_ptrs = base
        self.flag_ptrs = [p + L.flags_off for p in base]
        if base[self.rank] != self.buf.data_ptr():
            raise RuntimeError("symmetric memory: own peer pointer differs from the local buffer")

    def ranks_share_a_gpu(self) -> bool:
        """Whether two ranks of the group run on the same GPU (every rank's ``DEVICE_WORD``, read through the
        peer mappings: the same answer on every rank, no collective)."""
        ids = set()
        for p in range(self.layout.world_size):
            word = self.handle.get_buffer(p, (1,), torch.int32, (self.layout.flags_off // 4) + DEVICE_WORD)
            ids.add(int(word.item()))
        return len(ids) < self.layout.world_size

    def close(self) -> None:
        """Drop every reference this object holds to the symmetric buffer (the handle, the buffer and each view of
        it), so the memory goes when the last reference does -- here, unless the caller still holds a view -- and
        not in a later garbage-collector pass: such a pass can run inside a CUDA-graph capture, where torch's
        ``~AllocationRef`` (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemory.cu, 2.11) makes a CUDA call
        that a capturing stream forbids and the process aborts (seen on an H200: ``terminate called after throwing
        c10::AcceleratorError ... operation not permitted when stream is capturing``)."""
        self.handle = None
        for name, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(self, name, None)


__all__ = [
    "DEVICE_WORD",
    "DONE_BASE",
    "EPOCH_WORD",
    "FINISHED_WORD",
    "GUARD_BYTES",
    "READY_BASE",
    "SplitParts",
    "SymmetricWorkspace",
    "WorkspaceLayout",
    "device_id",
    "guard_words",
    "tile_slots",
    "use_cuda_backend",
]
