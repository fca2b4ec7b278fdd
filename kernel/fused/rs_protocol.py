"""The cross-rank flag protocol both GEMM + reduce-scatter kernels share (pull: :mod:`kernel.fused.gemm_rs`,
push: :mod:`kernel.fused.gemm_rs_push`): the device-side epoch, the waits on peers' flags, the call's end.

Flags are u32 words in each rank's symmetric flag area (layout: :mod:`kernel.fused.config`); their
meaning per protocol is in each kernel's design record. What is common, and stated once here:

``epoch`` (local word). Calls this rank's kernel has completed. Every consumer thread reads it
    (``ld.relaxed.gpu``) at kernel start: this call's epoch is ``e = epoch + 1`` (0 is skipped on wrap:
    0 means "never"). Written once, ``st.relaxed.gpu``, by the *last* CTA to finish (see
    ``finished``), so no CTA of this call can read the new value; the kernel boundary orders it before
    the next call's reads. It lives on the device: CUDA-graph replays advance it, the host never resets it.
``finished`` (local word). ``atom.acq_rel.gpu.add`` by one thread per CTA after the CTA's last read of
    shared data (CTA barrier first). The CTA that gets ``grid - 1`` is last: every other CTA's reads of
    this call happen-before its next actions (acq_rel chain). It resets the word to 0 (nobody else
    touches it until the next launch, which stream order puts after this one).
``done[p]`` (in rank q's area, written by rank p). The last CTA of rank p's call e, after all of p's
    reads of data other ranks wrote or will overwrite (acq_rel chain above), ``st.release.sys`` of
    ``e`` into ``done[p]`` of every rank (itself included). Before a rank's first TMA store of call
    e+1 into memory a peer reads, the storing warp of every CTA spins ``ld.acquire.sys`` until every
    ``done[p]`` has *reached* e (wrap-safe signed difference >= 0), then ``fence.proxy.async.global``
    (the stores are async-proxy writes ordered after a generic-proxy acquire). "Reached", not "equals":
    a peer can finish call e+1 and publish ``done = e+1`` before this rank's late CTAs start their
    wait (seen on the GPU: W=2, M=1 deadlocked with equality). It can never be two ahead (its call e+2
    needs this rank's ``done`` of e+1).
Spins: ``ld.acquire.sys`` with ``nanosleep`` backoff; no progress for ``spin_timeout_s`` (0 disables)
    executes ``trap``, so a broken peer is a CUDA error instead of a silent hang.

The rank is a run-time ``Int32`` of the kernels: one compile serves every rank of a group (and, through
the kernel cache of :mod:`kernel.fused.compile`, every process of a host). Peer addresses are picked
from the ``W`` peer pointers with a chain of ``selp`` (no dynamic indexing of kernel parameters).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

from . import ptx
from .config import (
    DONE_BASE,
    EPOCH_WORD,
    FINISHED_WORD,
    MAX_WORLD_SIZE,
    SPIN_SLEEP_NS,
    SPIN_TIMEOUT_S,
    SPLIT_K_CROSS_RANK_FAULTS,
    normalize_faults,
)
from .gemm import GemmConfig, HopperGemmBF16


class CrossRankGemm(HopperGemmBF16):
    """What both GEMM + reduce-scatter kernels share: validation of (W, faults), the epoch, the flag
    spins, the done wait before overwriting shared data and the end of a call. ``protocol`` names the
    subclass's protocol (fault names of the other protocol are rejected)."""

    protocol = ""

    def __init__(self, N: int, K: int, config: GemmConfig, world_size: int, rank: int | None = None,
                 spin_timeout_s: float = SPIN_TIMEOUT_S, faults=()):
        super().__init__(N, K, config)
        lowest = 1 if config.split_k else 2  # W == 1: the split-K GEMM (its parts need the flags and epoch)
        if not lowest <= world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be in {lowest}..{MAX_WORLD_SIZE}, got {world_size}")
        if rank is not None and not 0 <= rank < world_size:  # the rank itself is a launch argument
            raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
        self.world_size = int(world_size)
        self.spin_timeout_ns = int(spin_timeout_s * 1e9)
        # Fault-injected build (the kernel's design record); every switch is a trace-time constant.
        self.faults = normalize_faults(faults, self.protocol)
        if world_size == 1 and self.faults & frozenset(SPLIT_K_CROSS_RANK_FAULTS):
            raise ValueError(f"{sorted(self.faults & frozenset(SPLIT_K_CROSS_RANK_FAULTS))}: no owners to signal "
                             "at W == 1")

    # --- device side: addresses -------------------------------------------------------------------
    @cute.jit
    def peer_addr(self, ptrs: list, index: Int32) -> Int64:
        """``ptrs[index].toint()`` for a run-time ``index`` (0 <= index < W): a ``selp`` chain."""
        addr = ptrs[0].toint()
        for p in cutlass.range_constexpr(1, self.world_size):
            addr = Int64(cutlass.select_(index == p, ptrs[p].toint(), addr))
        return addr

    # --- device side: flags -----------------------------------------------------------------------
    @cute.jit
    def not_yet(self, seen: Int32, expected: Int32, at_least: cutlass.Constexpr):
        """Still waiting: ``seen != expected`` or, with ``at_least``, ``seen`` before ``expected``
        (wrap-safe epoch order: signed difference)."""
        if cutlass.const_expr(at_least):
            if cutlass.const_expr("epoch_order_signed" in self.faults):
                return seen < expected  # the fault build: wrong once the epochs cross 2^31
            return seen - expected < 0
        return seen != expected

    @cute.jit
    def spin_until(self, addr: Int64, expected: Int32, at_least: cutlass.Constexpr):
        """Spin (``ld.acquire.sys``, nanosleep backoff) until the u32 at ``addr`` equals ``expected`` (or,
        with ``at_least``, is ``expected`` or a later epoch); trap after ``spin_timeout_s`` of no progress."""
        seen = ptx.ld_acquire_sys_u32(addr)
        if self.not_yet(seen, expected, at_least):
            t0 = ptx.globaltimer_ns()
            while self.not_yet(seen, expected, at_least):
                ptx.nanosleep(SPIN_SLEEP_NS)
                seen = ptx.ld_acquire_sys_u32(addr)
                if cutlass.const_expr(self.spin_timeout_ns > 0):
                    if ptx.globaltimer_ns() - t0 > Int64(self.spin_timeout_ns):
                        ptx.trap()

    @cute.jit
    def call_epoch(self, my_flags: Int64):
        """``(previous epoch, this call's epoch)`` from the local epoch word (0 skipped on wrap)."""
        prev_epoch = ptx.ld_relaxed_gpu_u32(my_flags + Int64(EPOCH_WORD * 4))
        epoch = prev_epoch + 1
        if cutlass.const_expr("epoch_zero_used" not in self.faults):
            if epoch == 0:
                epoch = Int32(1)
        return prev_epoch, epoch

    @cute.jit
    def wait_peers_done(self, my_flags: Int64, prev_epoch: Int32, fence: cutlass.Constexpr = True):
        """Every rank's ``done`` word in our area has reached ``prev_epoch`` (they finished reading what
        our TMA stores of this call overwrite), then the proxy fence that orders those async-proxy stores
        after the acquires (``fence=False`` only in the fault build that plants its absence)."""
        for p in cutlass.range_constexpr(self.world_size):
            self.spin_until(my_flags + Int64((DONE_BASE + p) * 4), prev_epoch, True)
        if cutlass.const_expr(fence):
            cute.arch.fence_proxy("async.global")

    @cute.jit
    def finish_call(self, flag_ptrs: list, my_flags: Int64, rank: Int32, epoch: Int32, gdim: Int32,
                    advance_epoch: cutlass.Constexpr = True):
        """One thread per CTA, after a CTA barrier that follows the CTA's last read: count the CTA; the
        last one resets the counter, publishes ``done[rank] = epoch`` into every rank's area and advances
        the local epoch word (``advance_epoch=False`` only in the stale-epoch fault build)."""
        prior = ptx.atom_add_acq_rel_gpu_u32(my_flags + Int64(FINISHED_WORD * 4), 1)
        if prior == gdim - 1:
            ptx.st_relaxed_gpu_u32(my_flags + Int64(FINISHED_WORD * 4), 0)
            done_word = (Int64(DONE_BASE) + Int64(rank)) * 4
            for p in cutlass.range_constexpr(self.world_size):
                ptx.st_release_sys_u32(flag_ptrs[p].toint() + done_word, epoch)
            if cutlass.const_expr(advance_epoch):
                ptx.st_relaxed_gpu_u32(my_flags + Int64(EPOCH_WORD * 4), epoch)


__all__ = ["CrossRankGemm"]
