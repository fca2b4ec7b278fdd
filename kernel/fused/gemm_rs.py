"""Fused GEMM + reduce-scatter for Hopper (sm_90a) in CuTe DSL, over symmetric memory, no multicast.

Design record
=============

Operation (CONTRACT.md). Rank r of W computes ``P_r = x_r @ w_r.T`` (M x N, fp32 accumulate, bf16)
and returns rows ``r*S .. r*S+S-1`` (``S = ceil(M/W)``, only rows < M) of ``sum_p P_p``. One kernel
per call and rank: the persistent, warp-specialised GEMM of :mod:`kernel.fused.gemm` (same mainloop,
same tile schedule; host set-up, CTA prologue and producer warp are the base class's ``host_setup``,
``prologue`` and ``produce``), whose epilogue stores each bf16 partial tile into this rank's *own* symmetric
workspace and signals the tile's owner rank(s); after its last GEMM tile every CTA turns into a
reducer of this rank's shard: it waits for all W partials of a tile, loads them through peer
pointers in rank order 0..W-1, sums in fp32, rounds once to bf16 and stores the valid rows into
``out``. Single kernel (not GEMM kernel + reduce kernel) so that reducing the first finished tiles
overlaps the GEMM of the rest; it is deadlock-free for the reasons below.

Why it is bitwise repeatable: each output element is ``bf16((P_0 + P_1) + ... + P_{W-1})``, the bf16
partials widened exactly to fp32 and added in a fixed order, whatever the arrival order of the partials
(so it also equals ``torch`` summing the same fp32 partials in rank order).

Flags (u32 words in each rank's symmetric flag area; layout in :mod:`kernel.fused.config`). ``epoch``,
``finished``, ``done`` and the spins are the protocol both GEMM-RS kernels share, stated in
:mod:`kernel.fused.rs_protocol`; here what is particular to the pull protocol:

``ready[src][tile]`` (in the owner's area, written by ``src``). After the TMA stores of a tile's
    partial complete (``cp.async.bulk.wait_group 0`` in every lane of the store warp, then
    ``fence.proxy.async.global``, then ``__syncwarp``), lane 0 does ``st.release.sys`` of ``e`` into
    ``ready[src][tile]`` of every rank whose shard rows intersect the tile's rows (a shard boundary
    can fall inside a tile: up to ``ceil(tile_m / S) + 1`` owners). The owner's reducing thread spins
    ``ld.acquire.sys`` until the value *equals* ``e`` for all W sources, then a CTA barrier; the
    other threads' plain ``ld.global.v4`` peer loads are ordered after the acquire by that barrier.
    Equality is enough: a slot holds an older epoch until ``src`` signals this call, and never a newer
    one (``src`` cannot start call e+1 before the owner finished reading in e, see ``done``).
``done[p]`` (in rank q's area, written by rank p): p finished its reduction loads of call e (of
    every rank's partials). Before rank q overwrites its partials in call e+1, its store warps wait
    until every ``done[p]`` has reached e. So a rank never overwrites a partial a peer may still be
    reading: one buffer, no alternation needed.

Deadlock freedom. (1) Within a call, a CTA does all of its production (GEMM tiles, stores,
signals) before any cross-CTA wait; production waits on nothing but ``done`` of the *previous*
epoch. (2) The grid is ``min(tiles, SMs)`` CTAs of one per SM (the shared-memory footprint allows one):
all CTAs of a kernel are co-resident, so a reducer waiting on a sibling CTA's tile cannot block it.
(3) By induction on epochs: call e-1 completes on every rank (its waits depend only on productions
of e-1, which by (1) happen), so the ``done`` waits of call e are satisfied and every rank produces
all tiles of e, so every ``ready`` wait of e is satisfied. Ranks sharing one GPU are separate
processes whose kernels time-slice: a spinning kernel is pre-empted and the peer's kernel runs, so
the spins make progress (nanosleep backoff keeps the spinning lanes light). Under MPS (one server context,
ranks' kernels side by side, no pre-emption between clients) (2) needs every rank's whole grid resident at once,
which MPS does not promise. Clustered tiles: the cluster occupancy query answers for the whole GPU, and a rank's
66-SM share (50 %) did not hold its 33 two-CTA clusters (one H200, 23rd session: the 60 s trap; unclustered, the
same case passed; docs/evidence/2026-12-03-nightly-matrix-literal-mps/): an MPS client compiles no clustered config
(``wrapper.device_facts``). Unclustered: a share bounds how many SMs a client uses, not which, and small shares
round up (3 % and 6 % both got 8 SMs on an H200): 4 pools of W = 8 at 3 % each were 256 SMs' worth and a W = 8
call hit the trap; with the SMs budgeted (4 ranks at 32 SMs, two of them in the fused call) a full-grid call still
did -- likely two clients' grids contending for the same SMs; a hang only truly concurrent ranks open (W > 2 has not
run a GPU per rank) is not excluded yet -- and one client's trap tears down every client of the server (one H200,
25th session, docs/evidence/2026-12-04-mps-gate/). So a group with an MPS client runs the unfused fallback
(``wrapper.check_mps_clients``): run TP ranks that share a GPU time-sliced.
A late rank only delays the others. A spin that sees no progress for ``spin_timeout_s`` (default 60 s; 0 disables)
executes ``trap``: a broken peer shows up as a CUDA error instead of a silent hang.

M, N, K and the rank are launch arguments (``Int32``): one compile per (config, W) serves every shape and rank.

Wrap-around. ``e`` is a u32 that skips 0; flags are compared for equality. A stale slot could only
alias after exactly 2^32 - 1 calls without being rewritten.

Never writes outside: ``out`` rows ``< valid rows`` (``(row - r*S) < S`` and ``row < M``), columns
``< N``; this rank's partial rows ``< M`` (TMA clips); its own ``epoch``/``finished`` words; and the
``ready``/``done`` words named above in peers' flag areas. Guard zones after the partials and after
the flags are never addressed.

Memory ordering summary: data written by TMA (async proxy) -> wait_group 0 + proxy fence +
st.release.sys (flag) -> ld.acquire.sys + bar.sync -> ld.global peer loads; reads finished ->
bar.sync + atom.acq_rel.gpu -> st.release.sys (done) -> ld.acquire.sys + proxy fence -> TMA overwrite.
No ``multimem.*`` instruction, no multicast object.

Split-K (configs with ``split_k``; design and measurements: docs/DESIGN-splitk.md). Where the M x N tiles alone
leave SMs idle and K is long, the GEMM phase runs work units ``(tile, part)``, ``part < P`` (P a launch argument,
clamped to the k-tiles and to ``SPLIT_K_MAX``; the k-tiles of part p are ``[p * kt / P, (p + 1) * kt / P)``), one
CTA per unit up to the SM count. Phase 1: a unit's accumulators go *unrounded* (fp32) into this rank's local parts
buffer (plain device memory, not symmetric: no peer reads it), in fragment order of the epilogue's view of the
accumulators, ``st.global.v4.f32``; then a barrier of the consumer threads and ``st.release.sys`` of ``e`` into
the unit's part ready word (local). Phase 2: unit ``(tile, p)`` sums the tile's column slice ``p`` (epilogue
subtiles ``[p * E / P, (p + 1) * E / P)``, E subtiles of ``epi_tile_n`` columns a tile): its thread 0 spins
``ld.acquire.sys`` until the P part ready words of the tile equal ``e``, a barrier, every thread loads its own
fragment's values of the P parts (``ld.global.cg.v4.f32``, L2 only; all P loads of a vector issued before the
adds) and adds them in part order 0..P-1; the slice is stored as this rank's bf16 partial through the epilogue (its
subtiles only, TMA). W > 1: the store warp waits for those stores (``wait_group 0``, proxy fence) and lane 0
raises the unit's slice word (``st.release.sys``, local, after the part words). Phase 3 (W > 1): the tile's last
unit (``p = P - 1``) spins ``ld.acquire.sys`` on the other P - 1 slice words of the tile (its own slice precedes in
program order), then signals the tile's owners as above (``st.release.sys``: causality is transitive, so the
owner's acquire orders every unit's slice stores before its peer loads). So each rank still sends one bf16
partial per element (no extra NVLink traffic), rounded once from an fp32 sum (the contract's error model: a bf16
rounding per K part would not be, and the gate's ``cancel`` inputs show it), in a fixed order (bitwise
repeatable), and the sum is spread over all units (before the 9th session one CTA per tile read all P
parts).
W == 1 (the split-K GEMM): the same kernel with one rank, its "partial" is ``out``, no slice words, no owner
signals, no reduction; its epoch / finished / done words live with its parts (the wrapper's ``SplitParts``).
Deadlock freedom as above, two layers more: phase 1 waits on nothing cross-CTA, phase 2 only on phase-1 words of
this call, phase 3 only on phase-2 words, the reduction only on owners' signals; each CTA runs its units' phases in
that order and the grid is co-resident. Part and slice words compare for equality with the device-side epoch, so
graph replays and the previous call's words never satisfy a wait. The default build (no ``split_k``) traces none
of it: its PTX is unchanged (pinned).

Fault-injected builds (release gate, mutation meta-test). ``faults`` (pull names of
:data:`kernel.fused.config.KERNEL_FAULTS`, part of the compile-cache key) plants one real bug class
per name through ``cutlass.const_expr`` branches: with no fault the traced code is exactly the code
above, so the default build's PTX is byte-identical to a build without the switches (pinned by
``tests/kernel/test_fault_builds.py``). ``dropped_peer``: the reduction adds partials 0..W-2 only.
``relaxed_signal``: the ready flag is raised ``st.relaxed.sys`` right after the TMA stores are
issued (no ``wait_group 0``, no proxy fence): the flag can be seen before the partial.
``stale_epoch``: the epoch word is never written, so every call is epoch 1 and the previous call's
``ready``/``done`` words satisfy this call's waits. ``write_past_capacity``: CTA 0 also stores a zero
row at partial row ``W*S``, one past the padded partial (in guard A when ``S`` is ``S_max``).
``padding_written``: out's padding rows (``r*S + i >= M``) are stored (zeros).
``wrong_owner``: rank r reduces the shard of owner ``(r+1) % W`` (waiting on that owner's flags).
``epoch_zero_used``: the epoch is not moved past 0 when it wraps, so after 2^32 - 1 calls every flag word
never written since the workspace was zeroed satisfies an equality wait. ``epoch_order_signed``: the done
waits compare ``seen < expected`` (signed) instead of the signed difference, wrong once the epochs cross 2^31
(:mod:`kernel.fused.rs_protocol`; the gate reaches both wraps through ``advance_call_counter``).
``done_wait_skipped``: no wait for the peers' ``done`` words before a call's first TMA store (nor the proxy fence
after it): a rank's next call overwrites its partials -- and its ready words -- while a late peer still reads (or
waits on) the last call's. Seen only where calls run back to back (``Case.burst``, the repeats) and a peer is in
that window: ranks time-slicing one GPU open it rarely (a race of the GPU kill matrix).
Split-K builds only: ``dropped_part`` (the sum adds parts 0..P-2), ``bf16_parts`` (each part rounded to bf16
before it is stored), ``unordered_part_signal`` (no barrier between the part stores and thread 0's ready word),
``unwaited_slices`` (W > 1: the tile's last unit signals the owners without waiting for the other slices).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from . import ptx
from .config import READY_BASE, SPLIT_K_CHOICES
from .rs_protocol import CrossRankGemm

#: The most K parts a split-K launch takes (its ``splits`` argument is clamped to it): the sum is unrolled to it.
SPLIT_K_MAX = max(SPLIT_K_CHOICES)


class HopperGemmRsBF16(CrossRankGemm):
    """Fused GEMM + reduce-scatter, pull protocol, for (config, W); M, N, K and the rank are run-time.

    ``compiled(x, w, out, own_partials, M, N, K, slots, rank, splits, stream, *partials[W], *flags[W][, parts,
    part_ready])``: raw pointers; ``partials[p]`` / ``flags[p]`` are rank p's symmetric partial buffer and flag area
    (peer pointers), ``own_partials`` is ``partials[rank]`` (the TMA store target, built on the host side). The
    peer pointers come last, one argument each (CuTe DSL 4.8.1 exports no list argument, and no ``Int32`` among
    the variadic ones: ``splits``, the K parts of a split-K build, is a named argument every build takes and only
    the split-K build reads; its local parts buffer and part ready words follow the peers)."""

    protocol = "pull"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.vec_per_row = self.config.tile_n // 8  # 16-byte vectors in a tile row
        self.peers_summed = self.world_size - 1 if "dropped_peer" in self.faults else self.world_size
        self.split = self.config.split_k
        self.part_bytes = self.config.tile_m * self.config.tile_n * 4  # one fp32 K part of a tile
        self.epi_subtiles = self.config.tile_n // self.config.epi_tile_n  # a split-K unit sums a slice of them
        if self.split and (self.config.tile_m * self.config.epi_tile_n // self.num_mma_threads) % 4:
            raise ValueError("split-K needs whole 16-byte vectors of a thread in each epilogue subtile")

    # --- host side --------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        own_partial_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        slots: cutlass.Int32,
        rank: cutlass.Int32,
        splits: cutlass.Int32,
        stream: cuda.CUstream,
        *peer_ptrs,
    ):
        W = self.world_size
        partial_ptrs, flag_ptrs, split_args = list(peer_ptrs[:W]), list(peer_ptrs[W:2 * W]), list(peer_ptrs[2 * W:])
        self.bind_shape(n, k)
        atoms, num_m_tiles, grid_x = self.host_setup(x_ptr, w_ptr, own_partial_ptr, m)
        if cutlass.const_expr(self.split):  # one CTA per work unit (tile, K part), at most one per SM
            split_args.append(splits)
            grid_x = cutlass.min(num_m_tiles * self.num_n_tiles * cutlass.min(splits, self.k_tile_cnt),
                                 self.config.sm_count)
        self.kernel(
            *atoms,
            self.tiled_mma,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            num_m_tiles,
            m,
            n,
            k,
            slots,
            rank,
            out_ptr,
            partial_ptrs,
            flag_ptrs,
            split_args,
        ).launch(**self.launch_shape(grid_x, stream))

    # --- device side: flags -----------------------------------------------------------------------
    @cute.jit
    def signal_owners(self, flag_ptrs: list, m_tile: Int32, n_tile: Int32, m: Int32, shard: Int32,
                      slots: Int32, rank: Int32, epoch: Int32):
        """``st.release.sys`` of ``epoch`` into ready[rank][tile] of every rank owning tile rows."""
        row_lo = m_tile * self.tile_shape_mnk[0]
        row_hi = cutlass.min(row_lo + self.tile_shape_mnk[0], m) - 1
        owner_lo = row_lo // shard
        owner_hi = row_hi // shard
        slot = m_tile * self.num_n_tiles + n_tile
        word = Int64(READY_BASE) + Int64(rank) * Int64(slots) + Int64(slot)
        for o in cutlass.range_constexpr(self.world_size):
            if owner_lo <= o and o <= owner_hi:
                if cutlass.const_expr("relaxed_signal" in self.faults):
                    ptx.st_relaxed_sys_u32(flag_ptrs[o].toint() + word * 4, epoch)
                else:
                    ptx.st_release_sys_u32(flag_ptrs[o].toint() + word * 4, epoch)

    @cute.jit
    def publish_tile(self, warp_idx: Int32, consumer_tidx: Int32, flag_ptrs: list, m_tile: Int32, n_tile: Int32,
                     m: Int32, shard: Int32, slots: Int32, rank: Int32, epoch: Int32):
        """After a partial tile's TMA stores were issued: once they completed and are ordered before the flags
        (``wait_group 0`` in every lane of the store warp, proxy fence), lane 0 signals the tile's owners."""
        if warp_idx == self.epi_store_warp_id:
            self.stores_complete()
            if consumer_tidx == 0:
                self.signal_owners(flag_ptrs, m_tile, n_tile, m, shard, slots, rank, epoch)

    @cute.jit
    def stores_complete(self):
        """The store warp: its TMA stores completed and ordered before what lane 0 releases next (``wait_group
        0`` in every lane, proxy fence, ``__syncwarp``)."""
        if cutlass.const_expr("relaxed_signal" not in self.faults):
            cute.arch.cp_async_bulk_wait_group(0, read=False)
            cute.arch.fence_proxy("async.global")
        cute.arch.sync_warp()

    # --- device side: split-K parts ---------------------------------------------------------------
    @cute.jit
    def store_part(self, acc_view: cute.Tensor, unit_addr: Int64, consumer_tidx: Int32):
        """This thread's accumulators (fp32, in epilogue order: ``acc_view``) into the K part of a work unit at
        ``unit_addr``, in fragment order: 16-byte vector ``i`` of thread ``t`` at ``(i * threads + t) * 16``, so a
        warp's store is 512 contiguous bytes and the thread of the same index that sums the slice holding vector
        ``i`` reads each value back into the same fragment position."""
        lane = Int64(consumer_tidx * 16)
        for i4 in cutlass.range_constexpr(cute.size(acc_view) // 4):
            vals = [acc_view[4 * i4 + j] for j in range(4)]
            if cutlass.const_expr("bf16_parts" in self.faults):
                vals = [ptx.round_to_bf16(v) for v in vals]
            ptx.st_f32x4(unit_addr + lane + Int64(i4 * self.num_mma_threads * 16), vals)

    @cute.jit
    def sum_slice(self, acc_view: cute.Tensor, tile_addr: Int64, splits: Int32, lo: Int32, hi: Int32,
                  consumer_tidx: Int32):
        """Epilogue subtiles ``lo <= i < hi`` of ``acc_view`` = the ``splits`` fp32 K parts of a tile (its units
        ``tile * P .. tile * P + P - 1`` start at ``tile_addr``) added in part order 0..P-1: a fixed order, so the
        bf16 partial is bitwise repeatable whichever unit finished first. Every part of a vector is loaded before
        the first add (the loads overlap); a part index past P reloads part 0 and its add is not taken."""
        lane = Int64(consumer_tidx * 16)
        vecs = cute.size(acc_view) // 4 // self.epi_subtiles  # 16-byte vectors of a thread in one subtile
        summed = splits - 1 if cutlass.const_expr("dropped_part" in self.faults) else splits
        for e in cutlass.range_constexpr(self.epi_subtiles):
            if lo <= e and e < hi:
                for v4 in cutlass.range_constexpr(vecs):
                    i4 = e * vecs + v4
                    at = tile_addr + lane + Int64(i4 * self.num_mma_threads * 16)
                    loaded = [ptx.ld_f32x4_cg(at + Int64(cutlass.min(q, summed - 1)) * self.part_bytes)
                              for q in range(SPLIT_K_MAX)]
                    for j in cutlass.range_constexpr(4):
                        total = loaded[0][j]
                        for q in cutlass.range_constexpr(1, SPLIT_K_MAX):
                            total = cutlass.select_(q < summed, total + loaded[q][j], total)
                        acc_view[4 * i4 + j] = total

    @cute.jit
    def slice_stored(self, warp_idx: Int32, consumer_tidx: Int32, word: Int64, epoch: Int32):
        """After a unit's slice of its tile was stored (TMA): once those stores completed, lane 0 of the store warp
        raises the unit's slice word (``st.release.sys`` of ``epoch``; local)."""
        if warp_idx == self.epi_store_warp_id:
            self.stores_complete()
            if consumer_tidx == 0:
                ptx.st_release_sys_u32(word, epoch)

    # --- device side: the kernel ------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nk: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_layout_staged: cute.ComposedLayout,
        b_smem_layout_staged: cute.ComposedLayout,
        epi_smem_layout_staged: cute.ComposedLayout,
        num_m_tiles: cutlass.Int32,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        slots: cutlass.Int32,
        rank: cutlass.Int32,
        out_ptr: cute.Pointer,
        partial_ptrs: list,
        flag_ptrs: list,
        split_args: list,
    ):
        W = self.world_size
        self.bind_shape(n, k)
        tidx, bidx, gdim, warp_idx, warp_group_idx, mainloop_pipeline, sC, gC, tma_parts, tCrA, tCrB, accumulators = (
            self.prologue(tma_atom_a, mA_mk, tma_atom_b, mB_nk, tma_atom_c, mC_mn, tiled_mma,
                          a_smem_layout_staged, b_smem_layout_staged, epi_smem_layout_staged))
        num_tiles = num_m_tiles * self.num_n_tiles
        splits = None
        if cutlass.const_expr(self.split):
            splits = cutlass.min(cutlass.min(split_args[2], self.k_tile_cnt), SPLIT_K_MAX)
        self.init_wait()

        if warp_group_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == self.producer_warp_id:
                if cutlass.const_expr(self.split):
                    self.produce(tma_atom_a, tma_atom_b, tma_parts, mainloop_pipeline, bidx, gdim, num_tiles,
                                 num_m_tiles, splits)
                else:
                    self.produce(tma_atom_a, tma_atom_b, tma_parts, mainloop_pipeline, bidx, gdim, num_tiles,
                                 num_m_tiles)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            consumer_tidx = tidx - self.threads_per_warpgroup
            my_flags = self.peer_addr(flag_ptrs, rank)
            prev_epoch, epoch = self.call_epoch(my_flags)
            shard = (m + W - 1) // W

            # Before the first TMA store overwrites our partials: every rank finished reading the
            # previous call's (done[p] reached the previous epoch). Spun on by the lanes that issue the stores.
            if cutlass.const_expr("done_wait_skipped" not in self.faults):
                if warp_idx == self.epi_store_warp_id:
                    self.wait_peers_done(my_flags, prev_epoch)

            read_state, release_state, num_k_blocks, tma_store_pipeline = self.consumer_pipelines(tCrA)

            tile_idx = bidx
            tiles_done = cutlass.Int32(0)
            if cutlass.const_expr(not self.split):
                while tile_idx < num_tiles:
                    m_tile, n_tile = self.tile_coord(tile_idx, num_m_tiles)
                    release_state, read_state = self.mma_tile(tiled_mma, accumulators, tCrA, tCrB,
                                                              mainloop_pipeline, read_state, release_state,
                                                              num_k_blocks)
                    self.epilogue(
                        tiled_mma,
                        accumulators,
                        tma_atom_c,
                        sC,
                        gC[(None, None, m_tile, n_tile)],
                        tma_store_pipeline,
                        consumer_tidx,
                        warp_idx,
                        tiles_done,
                    )
                    # The partial tile is in global memory before its owners are told so.
                    self.publish_tile(warp_idx, consumer_tidx, flag_ptrs, m_tile, n_tile, m, shard, slots, rank,
                                      epoch)
                    tiles_done += 1
                    tile_idx += gdim
            else:
                # Split-K, phase 1: work split_units (tile, K part), each an fp32 part in this rank's local parts
                # buffer, its ready word raised (release) after a barrier of the consumer threads.
                parts_base, part_flags = split_args[0].toint(), split_args[1].toint()
                acc_view = self.r2s_copy(tiled_mma).retile(accumulators)
                split_units = num_tiles * splits
                slice_flags = part_flags + Int64(split_units) * 4  # after the split_units' part ready words
                work_unit = bidx
                while work_unit < split_units:
                    unit_tile = work_unit // splits
                    k_first, k_count = self.split_k_range(work_unit - unit_tile * splits, splits)
                    release_state, read_state = self.mma_tile(tiled_mma, accumulators, tCrA, tCrB,
                                                              mainloop_pipeline, read_state, release_state,
                                                              num_k_blocks, k_count)
                    self.store_part(acc_view, parts_base + Int64(work_unit) * self.part_bytes, consumer_tidx)
                    if cutlass.const_expr("unordered_part_signal" not in self.faults):
                        self.epilog_barrier.arrive_and_wait()
                    if consumer_tidx == 0:
                        ptx.st_release_sys_u32(part_flags + Int64(work_unit) * 4, epoch)
                    work_unit += gdim
                # Phase 2: unit (tile, p) sums the P parts of its slice of the tile (epilogue subtiles
                # [p * E / P, (p + 1) * E / P), column slices) in part order and stores them as this rank's bf16
                # partial through the epilogue; W > 1: then its slice word (release, after the stores completed).
                stored = Int32(0)
                work_unit = bidx
                while work_unit < split_units:
                    unit_tile = work_unit // splits
                    part = work_unit - unit_tile * splits
                    m_tile, n_tile = self.tile_coord(unit_tile, num_m_tiles)
                    if consumer_tidx == 0:
                        for p in range(splits):
                            self.spin_until(part_flags + Int64(unit_tile * splits + p) * 4, epoch, False)
                    self.epilog_barrier.arrive_and_wait()
                    lo = part * self.epi_subtiles // splits
                    hi = (part + 1) * self.epi_subtiles // splits
                    self.sum_slice(acc_view, parts_base + Int64(unit_tile * splits) * self.part_bytes, splits, lo,
                                   hi, consumer_tidx)
                    self.epilogue(tiled_mma, accumulators, tma_atom_c, sC, gC[(None, None, m_tile, n_tile)],
                                  tma_store_pipeline, consumer_tidx, warp_idx, tiles_done, epi_range=(lo, hi, stored))
                    stored += hi - lo
                    if cutlass.const_expr(W > 1):
                        self.slice_stored(warp_idx, consumer_tidx, slice_flags + Int64(work_unit) * 4, epoch)
                    work_unit += gdim
                # Phase 3 (W > 1): a tile's last unit signals its owners once the other split_units' slices are stored
                # (acquire of their slice words; its own slice precedes in program order).
                if cutlass.const_expr(W > 1):
                    if consumer_tidx == 0:
                        work_unit = bidx
                        while work_unit < split_units:
                            unit_tile = work_unit // splits
                            if work_unit - unit_tile * splits == splits - 1:
                                if cutlass.const_expr("unwaited_slices" not in self.faults):
                                    for p in range(splits - 1):
                                        self.spin_until(slice_flags + Int64(unit_tile * splits + p) * 4, epoch,
                                                        False)
                                m_tile, n_tile = self.tile_coord(unit_tile, num_m_tiles)
                                self.signal_owners(flag_ptrs, m_tile, n_tile, m, shard, slots, rank, epoch)
                            work_unit += gdim
            tma_store_pipeline.producer_tail()

            # --- reduction of this rank's shard: rows [r*S, min(r*S+S, M)) ---------------------------
            # (W == 1, a split-K GEMM: the partial is the result, stored into out by the epilogue)
            if cutlass.const_expr(W > 1):
                reduce_owner = rank
                red_flags = my_flags
                if cutlass.const_expr("wrong_owner" in self.faults):
                    reduce_owner = (rank + 1) % W
                    red_flags = self.peer_addr(flag_ptrs, reduce_owner)
                row_begin = shard * reduce_owner
                row_end = cutlass.min(row_begin + shard, m)
                if row_begin < row_end:
                    bm, bn = self.tile_shape_mnk[0], self.tile_shape_mnk[1]
                    mt0 = row_begin // bm
                    units = ((row_end - 1) // bm - mt0 + 1) * self.num_n_tiles
                    out_base = out_ptr.toint()
                    unit = bidx
                    while unit < units:
                        rm_tile = mt0 + unit // self.num_n_tiles
                        rn_tile = unit - (unit // self.num_n_tiles) * self.num_n_tiles
                        if consumer_tidx == 0:
                            rslot = Int64(rm_tile * self.num_n_tiles + rn_tile)
                            for src in cutlass.range_constexpr(W):
                                rword = Int64(READY_BASE) + Int64(src) * Int64(slots) + rslot
                                self.spin_until(red_flags + rword * 4, epoch, False)
                        self.epilog_barrier.arrive_and_wait()
                        lo = cutlass.max(rm_tile * bm, row_begin)
                        hi = cutlass.min(rm_tile * bm + bm, row_end)
                        col0 = rn_tile * bn
                        total = (hi - lo) * self.vec_per_row
                        v = consumer_tidx
                        while v < total:
                            row = lo + v // self.vec_per_row
                            col = col0 + (v - (v // self.vec_per_row) * self.vec_per_row) * 8
                            if col < self.N:
                                elem = (Int64(row) * Int64(self.N) + Int64(col)) * 2
                                # fixed rank order 0..W-1, fp32: bitwise repeatable
                                acc = ptx.ld_bf16x8_as_f32(partial_ptrs[0].toint() + elem)
                                for p in cutlass.range_constexpr(1, self.peers_summed):
                                    part = ptx.ld_bf16x8_as_f32(partial_ptrs[p].toint() + elem)
                                    for j in cutlass.range_constexpr(8):
                                        acc[j] = acc[j] + part[j]
                                out_elem = (Int64(row - row_begin) * Int64(self.N) + Int64(col)) * 2
                                ptx.st_f32x8_as_bf16(out_base + out_elem, acc)
                            v += self.num_mma_threads
                        unit += gdim

            if cutlass.const_expr("padding_written" in self.faults):
                # out rows [n_valid, S): the padding rows the contract says stay untouched
                zeros = [Float32(0.0)] * 8
                row_vecs = self.N // 8
                n_valid = cutlass.max(row_end - row_begin, 0)
                pad_total = (shard - n_valid) * row_vecs
                pv = bidx * self.num_mma_threads + consumer_tidx
                while pv < pad_total:
                    prow = n_valid + pv // row_vecs
                    pcol = (pv - (pv // row_vecs) * row_vecs) * 8
                    ptx.st_f32x8_as_bf16(out_ptr.toint() + (Int64(prow) * Int64(self.N) + Int64(pcol)) * 2,
                                         zeros)
                    pv += gdim * self.num_mma_threads
            if cutlass.const_expr("write_past_capacity" in self.faults):
                # one row past the W*S padded partial rows (== capacity, so guard A, when S == S_max)
                zeros = [Float32(0.0)] * 8
                if bidx == 0:
                    past = Int64(shard * W) * Int64(self.N) * 2 + self.peer_addr(partial_ptrs, rank)
                    cv = consumer_tidx
                    while cv < self.N // 8:
                        ptx.st_f32x8_as_bf16(past + Int64(cv) * 16, zeros)
                        cv += self.num_mma_threads

            # --- call finished: the last CTA publishes done and advances the epoch ------------------
            self.epilog_barrier.arrive_and_wait()
            if consumer_tidx == 0:
                self.finish_call(flag_ptrs, my_flags, rank, epoch, gdim, "stale_epoch" not in self.faults)


__all__ = ["HopperGemmRsBF16"]
