"""Fused GEMM + reduce-scatter for Hopper (sm_90a), push protocol: partials are pushed to their owner
during the GEMM and the owner's W-way sum is fused into the epilogue of its own tiles. No multicast.

Design record
=============

Operation (CONTRACT.md). Rank r of W computes ``P_r = x_r @ w_r.T`` (fp32 accumulate) and returns rows
``r*S .. r*S+S-1`` (``S = ceil(M/W)``, only rows < M) of ``sum_p bf16(P_p)``. Same persistent,
warp-specialised kernel as :mod:`kernel.fused.gemm` (host set-up, CTA prologue, producer warp, the
consumer mainloop ``mma_tile`` and the TMA-store epilogue are the base class's); what differs from the
pull protocol (:mod:`kernel.fused.gemm_rs`) is where partial tiles go and who sums them.

Why it overlaps. Pull: every rank stores all its partial tiles locally, then (after its last GEMM
tile) the same SMs load W partials of their shard through peer pointers: time ~ GEMM + transfer.
Push: a partial tile of a peer's shard is TMA-stored straight into that peer's *inbox* while the GEMM
goes on (the TMA engine moves it over NVLink; the SMs go on to the next tile); the owner adds the peers'
partials of its own tiles to its accumulator in their epilogue, reading local memory. Three things make
the transfer run *under* the GEMM instead of after it (the first GPU run measured push ~ GEMM + transfer
at N = 7168, K = 2048, e.g. M = 8192: 472 us ~ 315 us torch.mm + 155 us of NVLink):

1. The order interleaves (``interleaved``, :mod:`kernel.fused.push_order`). The first iteration ran every
   push before any own tile, so all (W-1)/W * M*N*2 bytes had to cross NVLink during the first (W-1)/W of
   the GEMM: at W = 2 at twice the average rate (M*N*2 B / T_gemm: 310 us of NVLink for 315 us of GEMM at
   M = 8192, no margin), and the last 1/W of the GEMM moved nothing. Now a lead of one wave of pushes is
   followed by cycles of W-1 pushes and one own tile: the transfer spreads over the whole GEMM (the
   average rate), and an own tile comes a wave (G positions) after the pushes of its round.
2. The epilogue ring holds a whole tile (:data:`kernel.fused.config.PUSH_EPI_STAGES`, 8 sub-tiles of
   128 x 32): the consumer warps write a pushed tile into shared memory and go on with the next mainloop;
   a ring sub-tile is reused only a tile later (``wait_group.read``), by when its TMA store has long read
   it. With the first iteration's 4-deep ring the consumers waited, per pushed tile, for half of it to
   drain over NVLink. Cost: the mainloop keeps 3 stages of 128x256x64 (4 before).
3. The ready signal of a pushed tile stays deferred by one mainloop (below): no mainloop waits on a
   remote completion unless the transfer of a tile takes longer than the next tile's mainloop.

On one GPU shared by the ranks (the ``shared-gpu`` topology: their kernels time-slice it) there is no link
to overlap, and an interleaved order costs a round of time slices per wave (a rank blocks at its first own
tile until every peer has run); the wrapper uses ``push_first`` there (every push, then every own tile: the
first iteration's order) and ``interleaved`` when every rank has its own GPU
(:meth:`kernel.fused.workspace.SymmetricWorkspace.ranks_share_a_gpu`, the same answer on every rank). The
order is a compile-time switch (``order``), part of the compile key.

Tiles are shard-local. Each owner o's rows ``[o*S, o*S + n_o)`` (``n_o = clamp(M - o*S, 0, S)``) are
tiled from their first row: tile (o, j, n) covers shard rows ``[j*BM, j*BM + BM)`` and columns
``[n*BN, n*BN + BN)``, so no tile straddles two owners (x rows are TMA-loaded from ``o*S + j*BM``;
rows >= M are zero-filled). There are ``W * ceil(S/BM) * ceil(N/BN)`` tiles; a tile with no valid row
(``j*BM >= n_o``: only at M < W*BM) is computed but neither stored nor signalled nor waited for.

No tile straddles a shard boundary, so there are no boundary tiles to schedule early (the pull kernel's
tiles do straddle: up to ``ceil(128 / S) + 1`` owners each).

Tile order (:mod:`kernel.fused.push_order`, traced here and enumerated by its CPU tests). Shard tile k of
owner o in the grouped raster of the GEMM; the push stream visits round k's owners from ``r + 1`` on (at
any time the W ranks push to W different owners); CTA ``b`` runs the positions of slots ``b, b + G, ...``,
wave ``w`` turned by ``w`` among the CTAs in the interleaved order (a CTA alternates pushes and own tiles
even when G is a multiple of W). ``push_first``: position = slot, every push before every own tile.

Inbox. The partial region of each rank's symmetric workspace (``W * S_max`` rows, the same allocation
as the pull protocol's partials) is W slots of ``S_max`` rows; slot ``src`` of owner o holds
``bf16(P_src)`` rows ``[o*S, o*S + n_o)`` (shard-local rows). Slot o of o itself is never written.
A push is the epilogue's TMA store through a descriptor over (o's inbox slot r, ``n_o`` x N): the
store clips rows >= ``n_o``, so nothing past the slot's valid rows is ever written. The own tile's
result goes through a descriptor over ``out`` (``n_r`` x N): padding rows are never written.

Flags (u32 words; ``epoch``, ``finished``, ``done`` and the spins are those of
:mod:`kernel.fused.rs_protocol`):

``ready[src][tile]`` (in the owner's area, written by ``src``; ``tile = j * ceil(N/BN) + n``).
    After the TMA stores of a pushed tile *completed* (``cp.async.bulk.wait_group 0`` in every lane of
    the store warp, then ``fence.proxy.async.global``, then ``__syncwarp``), lane 0 does
    ``st.release.sys`` of ``e``. The signal is *deferred*: the store warp issues tile t's pushes,
    goes on with tile t+1's mainloop, and signals t after that mainloop (its stores are long done by
    then), so no mainloop waits on a remote completion. Before any wait of its own (an own tile) and
    after its last tile a CTA flushes its pending signal. The owner's consumer thread 0 spins
    ``ld.acquire.sys`` until the value *equals* ``e`` for every ``src != r``, then a barrier over the
    consumer threads orders their inbox loads (plain ``ld.global``, generic proxy) after the acquire.
    Equality is enough: a slot holds an older epoch until ``src`` signals this call, and never a newer
    one (``src`` cannot push in call e+1 before the owner's ``done`` of e, see below).
``done[o]`` (in every source's area, written by owner o): o's last CTA, after every read of o's inbox
    in call e. Before its first TMA store of call e+1 (a push, or its own tile's store), the store warp
    of every CTA of a source waits until every ``done[p]`` has reached e, then
    ``fence.proxy.async.global`` (the pushes are async-proxy writes ordered after a generic acquire).
    So a source never overwrites a partial its owner may still be reading: one inbox, no alternation.

The sum (the owner's epilogue of an own tile, per accumulator element, in registers): the element's
(row, col) comes from the MMA partition of an identity tensor (elements pair adjacent columns, so a
partial pair is one 4-byte ``ld.global.cg``: L2 only, never an L1 line loaded before its tile was
signalled); ``p_r = bf16(acc)`` (rounded as the partial a rank sends), ``p_src`` loaded from inbox slot
``src``; per column chunk the own pairs wait packed in registers while the accumulators become the
running sums, and one loop over the sources serves every W (no spill, by ptxas's report); ``y = -0.0 + p_0 + p_1 + ... +
p_{W-1}`` in fp32, rank order 0..W-1 whatever the arrival order (``-0.0`` is the exact identity of
fp32 addition, so ``y`` is exactly the pull protocol's ``p_0 + ... + p_{W-1}``), rounded once to bf16
by the epilogue. Hence bitwise repeatable, bitwise equal to the pull protocol, and bitwise equal to
torch mm + reduce-scatter wherever that sum is exact (exact inputs at any W; all inputs at W = 2).

Deadlock freedom. (1) Production (pushes and their signals) waits on nothing of this call: only on
``done`` of the previous call, which by induction on epochs completes; a pushed tile is signalled after
the CTA's next mainloop, which waits on nothing of another rank either, or when the CTA's tiles end.
(2) In both orders, own tile k sits at a larger position than every push of round k, on every rank
(:mod:`kernel.fused.push_order`; the positions are the same function on every rank). (3) Take the
smallest position at which some CTA of some rank would wait forever. Before it, that CTA has flushed the
signal of its previous push. It waits for pushes of round k by peers, at smaller positions: each peer
CTA running them has reached them (its earlier positions are smaller still, so none of them blocks
forever), issued them and signals them after its next mainloop or at its end -- a contradiction. The
peer CTA must be running: the grid is ``min(tiles, SMs)`` CTAs of one per SM, all resident when the
kernel runs, the assumption the pull kernel makes too (another kernel of the same rank holding SMs at
the same time, e.g. a second fused call on another stream, could break it). So a rank whose kernel runs
late (skew), or ranks whose kernels time-slice one GPU (a spinning kernel is pre-empted, the peer's
runs), only delay each other. Within a rank no CTA ever waits on another CTA (the ``finished`` count is
not a wait). ``push_first`` keeps the first iteration's stronger property: a CTA does all its pushes,
and flushes their signals, before its first wait.

Never writes outside: ``out`` rows < ``n_r``, columns < N; inbox slot r of each owner o, rows < ``n_o``;
its own ``epoch``/``finished`` words; ``ready``/``done`` words named above in peers' areas.

Memory ordering summary: (push) stmatrix -> fence.proxy.async.shared::cta + bar -> TMA store to the
peer -> wait_group 0 + fence.proxy.async.global + st.release.sys (ready, deferred) ->
(owner) ld.acquire.sys + bar.sync -> ld.global inbox -> sum -> bar.sync + atom.acq_rel.gpu ->
st.release.sys (done) -> (source, next call) ld.acquire.sys + fence.proxy.async.global -> TMA push.

Fault-injected builds (``faults``, push names of :data:`kernel.fused.config.KERNEL_FAULTS`; trace-time
switches, off by default: the default build's PTX does not depend on them):
``consumer_fence_missing``: no ``fence.proxy.async.global`` after the ``done`` acquires, before the
pushes. ``early_signal``: ``ready`` raised (still ``st.release.sys``) right after the pushes are
issued, with no ``wait_group 0`` and no proxy fence: the owner can read the slot before the data
landed. ``wrong_inbox_slot``: a source pushes into slot ``(r+1) % W`` of the owner (the owner reads
slot r). ``own_partial_skipped``: the owner sums the W-1 inbox partials without its own.

Measurement-only builds (:data:`kernel.fused.config.PUSH_EXPERIMENTS`; ``bench/bench_gemm_rs.py``'s A/B
table, never a result: the wrapper names their path ``fused-<name>``): ``no_mma`` (compile-time: no
mainloop, zero accumulators: the pushes, flags and sums alone), and, in the wrapper, ``local_push`` (the
launcher passes the rank's own workspace as every peer's inbox: the same kernel, TMA stores at local speed)
and ``ring4`` (the first iteration's 4-deep ring, 4 mainloop stages).

Expected limits. The last ~G/(W-1) own tiles come after the last pushes (nothing is left to interleave
them with): at large W they wait about one tile's transfer at the end. A pushed tile's stores must be
complete one mainloop later (the deferred signal's ``wait_group 0``, in a consumer warp): if NVLink
delivers less than a tile per mainloop per pushing CTA (128x256 tiles at K = 2048 at W = 2: 64 KiB per
~18 us per CTA, half the CTAs pushing at a time: ~240 GB/s of the ~380 measured), the consumers wait there.
At small M (one wave) nothing can overlap: an own tile waits for its peers' pushes of the same wave.
Shard-local tiles re-read B once per shard: at large W and small M (shards of a few rows) the pull
kernel's M-grid tiles load far less.

Measured: first iteration (push_first, 4-deep ring), 2x H200, W = 2, N = 7168, K = 2048: 26.8 / 46.1 /
46.3 / 72.2 / 136.5 / 257.0 / 472.2 / 922.6 us at M = 128 .. 16384 (torch mm + NCCL RS: 33.0 / 47.1 /
63.5 / 101.3 / 169.5 / 347.5 / 628.4 / 1207.9). This iteration: the lead's next GPU run
(``bench/gpu_kernel_check.sh``).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from . import ptx, push_order
from .config import KERNEL_EXPERIMENTS, READY_BASE, check_push_build
from .rs_protocol import CrossRankGemm


def _select(cond, a, b) -> Int32:
    """``select`` of :mod:`kernel.fused.push_order` for traced ``Int32`` values."""
    return Int32(cutlass.select_(cond, Int32(a), Int32(b)))


class HopperGemmRsPushBF16(CrossRankGemm):
    """Fused GEMM + reduce-scatter, push protocol, for (config, W); M, N, K and the rank are run-time.

    ``compiled(x, w, out, M, N, K, slot_rows, slots, rank, stream, *inboxes[W], *flags[W])``: raw pointers;
    ``inboxes[p]`` / ``flags[p]``: rank p's symmetric partial region (its inbox) and flag area, one
    argument each (CuTe DSL 4.8.1 exports no list argument); ``slot_rows``: rows of one inbox slot
    (``S_max``); ``slots``: ready words per source."""

    protocol = "push"

    def __init__(self, *args, order: str = "interleaved", experiment: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        if self.config.split_k:
            raise ValueError("split-K is a pull-protocol build (the push kernel pushes whole-K partial tiles)")
        if self.config.cluster_m > 1:
            raise ValueError("clustered tiles are pull-protocol builds (the push kernel's tile orders are per CTA)")
        check_push_build(order, experiment)
        if experiment and experiment not in KERNEL_EXPERIMENTS:
            raise ValueError(f"push experiment {experiment!r} is not a kernel build (the wrapper's)")
        self.order, self.experiment = order, experiment
        # The own tile's sum runs in column chunks: the own pairs of one chunk wait packed in registers
        # next to the accumulators. ptxas reports (``remarks{ptx}``, 4.8.1) no spill with two chunks at
        # W = 2 for 256-, 128- and 64x128 tiles; 224-wide tiles, and W >= 4 since the interleaved order's
        # tile arithmetic (4-8 bytes of spill at W = 4 and 8 with 256-wide tiles) need four.
        self.sum_chunks = 2 if self.world_size == 2 and self.config.tile_n != 224 else 4

    # --- host side --------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        slot_rows: cutlass.Int32,
        slots: cutlass.Int32,
        rank: cutlass.Int32,
        stream: cuda.CUstream,
        *peer_ptrs,
    ):
        self.bind_shape(n, k)
        W, N, BM = self.world_size, self.N, self.tile_shape_mnk[0]
        inbox_ptrs, flag_ptrs = list(peer_ptrs[:W]), list(peer_ptrs[W:])
        shard = (m + W - 1) // W
        # a TMA descriptor needs every extent >= 1: a rank with no valid row gets 1, and no store goes there
        own_rows = cutlass.max(cutlass.min(m - rank * shard, shard), 1)
        atoms, _, _ = self.host_setup(x_ptr, w_ptr, out_ptr, m, c_rows=own_rows)
        src_slot = rank
        if cutlass.const_expr("wrong_inbox_slot" in self.faults):
            src_slot = (rank + 1) % W
        push_atoms = []
        for o in cutlass.range_constexpr(W):
            rows_o = cutlass.max(cutlass.min(m - o * shard, shard), 1)
            slot_base = inbox_ptrs[o] + Int64(src_slot) * Int64(slot_rows) * Int64(N)
            m_inbox = cute.make_tensor(slot_base, cute.make_layout((rows_o, N), stride=(N, 1)))
            atom, _ = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
                m_inbox,
                cute.slice_(self.epi_smem_layout_staged, (None, None, 0)),
                self.epi_tile,
            )
            push_atoms.append(atom)
        mt_per_shard = (shard + BM - 1) // BM
        num_tiles = W * mt_per_shard * self.num_n_tiles
        grid_x = cutlass.min(num_tiles, self.config.sm_count)
        self.kernel(
            *atoms,
            self.tiled_mma,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            push_atoms,
            m,
            n,
            k,
            shard,
            mt_per_shard,
            slot_rows,
            slots,
            rank,
            inbox_ptrs,
            flag_ptrs,
        ).launch(
            grid=[grid_x, 1, 1],
            block=[self.threads_per_cta, 1, 1],
            min_blocks_per_mp=1,
            stream=stream,
        )

    # --- device side: the tile order --------------------------------------------------------------
    @cute.jit
    def push_tile_coord(self, tile_idx: Int32, schedule):
        """CTA slot ``tile_idx`` (``bidx + wave * grid``) -> (owner, shard-local m tile, n tile): the
        position in the build's order (:mod:`kernel.fused.push_order`; ``interleaved``: lead of one wave,
        waves rotated; ``push_first``: no lead limit, no rotation), then the grouped raster inside a shard."""
        mt_per_shard, rank, gdim, num_tiles = schedule[1], schedule[2], schedule[5], schedule[6]
        interleaved = self.order == "interleaved"
        position = push_order.slot_position(tile_idx, gdim, num_tiles, interleaved, _select)
        lead = num_tiles
        if cutlass.const_expr(interleaved):
            lead = gdim
        step, k = push_order.tile_at(position, mt_per_shard * self.num_n_tiles, self.world_size, lead, _select)
        owner = (rank + 1 + step) % self.world_size
        j, n = self.tile_coord(k, mt_per_shard)
        return owner, j, n

    @cute.jit
    def k_tiles_of(self, tma_parts, tile_idx: Int32, schedule):
        """A's k-tiles start at x row ``owner * S + j * BM`` (off the M-tile grid): A's TMA coordinates are
        offset there and partitioned per tile; B's are the n-th column tile as in the GEMM."""
        shard, tma_atom_a, mA_mk = schedule[0], schedule[3], schedule[4]
        owner, j, n = self.push_tile_coord(tile_idx, schedule)
        mA_tile = cute.domain_offset((owner * shard + j * self.tile_shape_mnk[0], 0), mA_mk)
        gA = cute.local_tile(mA_tile, cute.slice_(self.tile_shape_mnk, (None, 0, None)), (0, None))
        _, tAgA_t = cute.nvgpu.cpasync.tma_partition(
            tma_atom_a, 0, cute.make_layout(1), cute.group_modes(tma_parts[4], 0, 2), cute.group_modes(gA, 0, 2)
        )
        return tAgA_t, tma_parts[3][(None, n, None)]

    @cute.jit
    def shard_rows(self, m: Int32, shard: Int32, owner: Int32) -> Int32:
        """Valid rows of ``owner``'s shard: ``clamp(M - owner*S, 0, S)``."""
        return cutlass.max(cutlass.min(m - owner * shard, shard), 0)

    # --- device side: flags and the sum -----------------------------------------------------------
    @cute.jit
    def signal_pushed(self, flag_ptrs: list, owner: Int32, slot: Int32, slots: Int32, rank: Int32,
                      epoch: Int32, consumer_tidx: Int32, complete: cutlass.Constexpr = True):
        """The store warp: the pushes of ``slot`` to ``owner`` are complete (``wait_group 0`` + proxy fence in
        every lane, unless ``complete=False``: the early-signal fault), then lane 0 raises ready[rank][slot]
        in the owner's area (``st.release.sys``). ``owner < 0``: nothing pending."""
        if owner >= 0:
            if cutlass.const_expr(complete):
                cute.arch.cp_async_bulk_wait_group(0, read=False)
                cute.arch.fence_proxy("async.global")
            cute.arch.sync_warp()
            if consumer_tidx == 0:
                word = Int64(READY_BASE) + Int64(rank) * Int64(slots) + Int64(slot)
                ptx.st_release_sys_u32(self.peer_addr(flag_ptrs, owner) + word * 4, epoch)

    @cute.jit
    def wait_inbox(self, my_flags: Int64, slot: Int32, slots: Int32, rank: Int32, epoch: Int32):
        """Consumer thread 0: every source's partial of ``slot`` is in our inbox (ready == epoch)."""
        for src in cutlass.range_constexpr(self.world_size):
            if src != rank:
                word = Int64(READY_BASE) + Int64(src) * Int64(slots) + Int64(slot)
                self.spin_until(my_flags + word * 4, epoch, False)

    @cute.jit
    def accumulator_coords(self, tiled_mma: cute.TiledMma, consumer_tidx: Int32) -> cute.Tensor:
        """(row, col) in the tile of each of this thread's accumulator elements (same shape and order).
        A helper, not inline: a method called on ``tiled_mma`` in the kernel body would make the branch
        carry ``tiled_mma``, which ``mma_tile`` rebinds inside the tile loop."""
        return tiled_mma.get_slice(consumer_tidx).partition_C(
            cute.make_identity_tensor((self.tile_shape_mnk[0], self.tile_shape_mnk[1])))

    @cute.jit
    def sum_inbox_into(self, accumulators: cute.Tensor, tCcC: cute.Tensor, inbox: Int64, slot_rows: Int32,
                       row0: Int32, col0: Int32, rows: Int32, rank: Int32):
        """Every accumulator element (tile coordinate ``tCcC[i]``, shard-local row ``row0 + .``) becomes
        ``-0.0 + p_0 + ... + p_{W-1}`` in rank order: ``p_rank = bf16(acc)``, ``p_src`` the bf16 at (row, col)
        of inbox slot ``src``. Elements come in pairs of adjacent columns (checked while tracing), so each
        partial pair is one 4-byte load; per column chunk, the own pairs wait packed while the accumulators
        become the running sums; one loop over the sources (all loads of a chunk in flight) serves every W."""
        pair_shape, pair_stride = tCcC.layout.shape[0][0], tCcC.layout.stride[0][0]
        if cutlass.const_expr(pair_shape != 2 or str(pair_stride) != "1@1"):
            raise RuntimeError(f"accumulator fragment does not pair adjacent columns: {tCcC.layout}")
        npairs = cute.size(accumulators) // 2
        chunk = npairs // self.sum_chunks
        own = cute.make_rmem_tensor((chunk,), Int32)
        slot_bytes = Int64(slot_rows) * Int64(self.N * 2)
        for c in cutlass.range_constexpr(self.sum_chunks):
            for q in cutlass.range_constexpr(chunk):
                p = c * chunk + q
                own[q] = ptx.pack_bf16x2(accumulators[2 * p], accumulators[2 * p + 1])
                accumulators[2 * p] = Float32(-0.0)
                accumulators[2 * p + 1] = Float32(-0.0)
            for src in range(self.world_size):
                base = inbox + Int64(src) * slot_bytes
                for q in cutlass.range_constexpr(chunk):
                    p = c * chunk + q
                    row = row0 + tCcC[2 * p][0]
                    col = col0 + tCcC[2 * p][1]
                    valid = (row < rows) & (col < self.N) & (src != rank)
                    pair = ptx.ld_b32_if(base + (Int64(row) * Int64(self.N) + Int64(col)) * 2, Int32(valid))
                    if cutlass.const_expr("own_partial_skipped" not in self.faults):
                        pair = Int32(cutlass.select_(src == rank, own[q], pair))
                    lo, hi = ptx.add_bf16x2(accumulators[2 * p], accumulators[2 * p + 1], pair)
                    accumulators[2 * p] = lo
                    accumulators[2 * p + 1] = hi

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
        push_atoms: list,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        shard: cutlass.Int32,
        mt_per_shard: cutlass.Int32,
        slot_rows: cutlass.Int32,
        slots: cutlass.Int32,
        rank: cutlass.Int32,
        inbox_ptrs: list,
        flag_ptrs: list,
    ):
        self.bind_shape(n, k)
        BM, BN = self.tile_shape_mnk[0], self.tile_shape_mnk[1]
        tidx, bidx, gdim, warp_idx, warp_group_idx, mainloop_pipeline, sC, gC, tma_parts, tCrA, tCrB, accumulators = (
            self.prologue(tma_atom_a, mA_mk, tma_atom_b, mB_nk, tma_atom_c, mC_mn, tiled_mma,
                          a_smem_layout_staged, b_smem_layout_staged, epi_smem_layout_staged))
        num_tiles = self.world_size * mt_per_shard * self.num_n_tiles
        schedule = (shard, mt_per_shard, rank, tma_atom_a, mA_mk, gdim, num_tiles)
        no_mma = self.experiment == "no_mma"
        self.init_wait()

        if warp_group_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == self.producer_warp_id:
                if cutlass.const_expr(not no_mma):
                    self.produce(tma_atom_a, tma_atom_b, tma_parts, mainloop_pipeline, bidx, gdim, num_tiles,
                                 schedule)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            consumer_tidx = tidx - self.threads_per_warpgroup
            my_flags = self.peer_addr(flag_ptrs, rank)
            my_inbox = self.peer_addr(inbox_ptrs, rank)
            prev_epoch, epoch = self.call_epoch(my_flags)

            read_state, release_state, num_k_blocks, tma_store_pipeline = self.consumer_pipelines(tCrA)

            tile_idx = bidx
            tiles_done = cutlass.Int32(0)
            pending_owner = Int32(-1)  # the last pushed tile whose ready signal is still owed
            pending_slot = Int32(0)
            while tile_idx < num_tiles:
                owner, j, n = self.push_tile_coord(tile_idx, schedule)
                slot = j * self.num_n_tiles + n
                has_rows = j * BM < self.shard_rows(m, shard, owner)
                if cutlass.const_expr(no_mma):
                    accumulators.fill(0.0)
                else:
                    release_state, read_state = self.mma_tile(tiled_mma, accumulators, tCrA, tCrB,
                                                              mainloop_pipeline, read_state, release_state,
                                                              num_k_blocks)
                if warp_idx == self.epi_store_warp_id:
                    # the previous push (issued a mainloop ago) is complete: tell its owner
                    if cutlass.const_expr("early_signal" not in self.faults):
                        self.signal_pushed(flag_ptrs, pending_owner, pending_slot, slots, rank, epoch, consumer_tidx)
                    if tiles_done == 0:
                        # before our first TMA store: every owner finished reading the previous call's inbox
                        self.wait_peers_done(my_flags, prev_epoch, "consumer_fence_missing" not in self.faults)
                pending_owner = Int32(-1)
                if has_rows:
                    if owner == rank:
                        if consumer_tidx == 0:
                            self.wait_inbox(my_flags, slot, slots, rank, epoch)
                        self.epilog_barrier.arrive_and_wait()
                        self.sum_inbox_into(accumulators, self.accumulator_coords(tiled_mma, consumer_tidx),
                                            my_inbox, slot_rows, j * BM, n * BN, self.shard_rows(m, shard, rank),
                                            rank)
                        self.epilogue(tiled_mma, accumulators, tma_atom_c, sC, gC[(None, None, j, n)],
                                      tma_store_pipeline, consumer_tidx, warp_idx, tiles_done)
                    else:
                        self.epilogue(tiled_mma, accumulators, tma_atom_c, sC, gC[(None, None, j, n)],
                                      tma_store_pipeline, consumer_tidx, warp_idx, tiles_done,
                                      store_atoms=push_atoms, store_index=owner)
                        if cutlass.const_expr("early_signal" in self.faults):
                            if warp_idx == self.epi_store_warp_id:
                                self.signal_pushed(flag_ptrs, owner, slot, slots, rank, epoch, consumer_tidx, False)
                        else:
                            pending_owner = owner
                            pending_slot = slot
                    tiles_done += 1  # epilogues run: the store ring's position
                tile_idx += gdim
            if cutlass.const_expr("early_signal" not in self.faults):
                if warp_idx == self.epi_store_warp_id:
                    self.signal_pushed(flag_ptrs, pending_owner, pending_slot, slots, rank, epoch, consumer_tidx)
            tma_store_pipeline.producer_tail()

            # --- call finished: the last CTA publishes done (our inbox is free) and advances the epoch ---
            self.epilog_barrier.arrive_and_wait()
            if consumer_tidx == 0:
                self.finish_call(flag_ptrs, my_flags, rank, epoch, gdim)


__all__ = ["HopperGemmRsPushBF16"]
