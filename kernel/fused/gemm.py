"""Persistent, warp-specialised BF16 GEMM for Hopper (sm_90a) in CuTe DSL: ``y = x @ w.T``.

Design record
=============

Operation. ``x``: (M, K) bf16 row-major, ``w``: (N, K) bf16 row-major (both K-major, the
``nn.Linear`` layout), ``y``: (M, N) bf16 row-major, fp32 accumulation. In CuTe terms A = x (M-by-K,
K-major), B = w (N-by-K, K-major), C = y (N-major).

Compile-time vs run-time. The tile shape, the stage counts and the persistent grid size are compile-time constants
(one compiled kernel per (config, arch)). M, N and K are run-time ``Int32`` arguments: one compiled kernel serves
every shape (``bind_shape`` binds them at the top of the host function and of the kernel body, so the helpers read
the values of the region they are traced in; the k-tile loop was a run-time loop already). The kernel takes raw
global pointers (16-byte aligned) and builds ``mA``/``mB``/``mC`` itself, so the host wrapper needs no DLPack round
trip per call and part 2 can add a workspace pointer without changing the operand story.

Requirements (checked by the host wrapper, ``kernel.fused.wrapper``): K % 64 == 0 (the K tile),
N % 8 == 0 (16-byte rows for TMA), every base pointer 16-byte aligned, tensors contiguous.
N need not be a multiple of the N tile (TMA clips the last column tile), nor M of the M tile.

Warp roles (``threads_per_cta`` = 384):

* warpgroup 0, warp 0 -- producer: TMA loads of one (BM, BK) tile of x and one (BN, BK) tile of w
  per k-step into stage ``s`` of an ``ab_stage``-deep ring (``PipelineTmaAsync``: a *full* mbarrier
  per stage, armed with the expected transaction bytes, completed by the TMA engine; an *empty*
  mbarrier per stage, arrived by every consumer warp after its wgmma reading that stage retired).
  Warpgroup 0 gives registers back (``setmaxnreg`` 40).
* warpgroups 1..2 -- consumers ("cooperative"): each owns 64 rows of the 128-row tile, issues
  ``wgmma.mma_async`` m64n256k16 from shared memory (4 per k-step), keeps one wgmma batch in flight
  (``wait_group(1)``) and releases the stage of the previous batch. ``setmaxnreg`` 232: the
  64x256 fp32 accumulator is 128 registers per thread.

Rows and columns past (M, N): the TMA descriptors of x and y carry the real M (and N), so TMA loads
zero-fill rows >= M (they only feed accumulator rows >= M) and TMA stores clip at the tensor bounds:
no row >= M of y is ever written, no row >= M of x is ever read into a valid row.

Persistent tile scheduler: ``grid = min(num_tiles, sm_count)`` CTAs; CTA ``b`` processes linear tiles
``b, b + grid, b + 2 grid, ...``. The linear index is rastered in groups of ``group_n`` column tiles
(M fastest inside a group) so that one wave touches a compact block of x rows and w rows (L2 reuse).
Producer and consumers run the same deterministic schedule, no communication needed.

Epilogue (:meth:`HopperGemmBF16.epilogue`; the GEMM-RS kernels store partials through it, the push
kernel into peers' inboxes through other TMA descriptors): per (128, 32) sub-tile, accumulators -> bf16
-> ``stmatrix`` into a 4-deep shared ring -> ``fence.proxy.async.shared::cta`` -> named barrier over the
256 consumer threads -> one thread issues the TMA store (bulk-group ring ``PipelineTmaStore``: a buffer
is reused only after its store has read shared memory). The producer keeps prefetching the next tile
during the epilogue.

Shared memory (128x256x64 tile, bf16): 48 KiB per stage, 4 stages = 192 KiB, + 32 KiB epilogue ring
+ barriers, under the 227 KiB a CTA may use on H200. One CTA per SM.

No ``multimem.*`` instruction is emitted (no NVLink multicast object). Clusters (configs with ``cluster_m`` = 2, the
64-row tiles of pull and the W == 1 GEMM, 11th session): the grid runs in clusters of two CTAs along x; the two run
M tiles ``2i`` and ``2i + 1`` of the same column tile (:meth:`tile_coord`; an odd last M tile gets an idle twin whose
loads read zeros past M and whose stores TMA clips), and each TMA-loads half of the B k-tile with
``.multicast::cluster`` into both CTAs' stage (an on-chip copy into the cluster's shared memory, not NVLink
multicast). A stage's *empty* barrier then counts the consumer warps of both CTAs (each releases to both), so a
producer never refills a stage its twin still reads; the barriers' initialisation is fenced cluster-wide
(``init_wait``), and ``producer_tail`` keeps a CTA alive until its twin released every stage it filled. The default
build traces none of it (its PTX is pinned). Fault-injected builds (pull, the GPU kill matrix):
``cluster_local_release`` (the empty barriers count this CTA's consumer warps only) and ``cluster_unaware_schedule``
(the twins take tiles of the plain raster, other column tiles, while multicasting their B halves to each other).
Measured (one H200, 11th session, W = 1, vs torch.mm): M = 128 at
N x K = 7168x2048 / 7168x14336 / 8192x2048 / 8192x14336: 0.94 / 1.11 / 0.99 / 0.99 (0.90 / 0.98 / 0.83 / 0.82
before: 64x128 tiles or split-K).

Configs used by the wrapper (:mod:`kernel.fused.tiles`, chosen per M by one cost model): 128x256x64,
128x224x64 and 64x128x64 (one consumer warpgroup), for both protocols and the W == 1 GEMM; pull also 64x112 and the
clustered 64x112 / 64x128 (pull and W == 1 with
the 4-deep epilogue ring, push with the deep one). Until the 7th session pull had 128x256 and 128x128. Pull and
the W == 1 GEMM also have split-K builds of 128x256 and 128x224 (:mod:`kernel.fused.gemm_rs`; ``produce`` and
``mma_tile`` take a unit's k-tile range through ``splits`` / ``k_tiles``, and trace the unsplit loops unchanged
without them).

Shared by every kernel (this GEMM and both GEMM + reduce-scatter kernels): ``host_setup``, ``prologue``,
the producer warp ``produce`` (tile order through ``k_tiles_of``), the consumer pipelines
(``consumer_pipelines``), the consumer mainloop of one tile (``mma_tile``) and the TMA-store ``epilogue``.
``mma_tile`` returns the pipeline states and the caller's tile loop assigns them: CuTe DSL carries a
value through a ``while`` loop only if the loop body assigns it or calls a method on it, so a helper that
only advanced them would restart every tile at stage 0 (it compiles; the register-normalised PTX pin
in ``tests/kernel/test_fault_builds.py`` catches it).

Measured (one H200, torch 2.11 cu130, CUDA graphs of 10 calls with inputs rotated past L2, median of
25; ``bench/bench_gemm.py``; TFLOP/s ours / torch.mm, ratio; outputs bitwise equal to torch.mm):

    M     N=4096,K=2048     N=7168,K=2048     N=4096,K=4096     N=7168,K=4096
    128   158/247 0.64      264/341 0.77      187/291 0.64      311/388 0.80
    512   590/598 0.99      609/659 0.92      678/702 0.96      678/735 0.92
    1024  678/678 1.00      659/653 1.01      761/766 0.99      699/684 1.02
    4096  756/758 1.00      756/686 1.10      740/702 1.05      738/691 1.07
    8192  737/688 1.07      715/683 1.05      702/691 1.02      674/699 0.96

Compile: 0.4-0.9 s per config (per (N, K, config) before N and K became run-time arguments).
Host time per eager wrapper call (W = 1, `out=` given): about 36 us on 11-29; 31.8-40.7 us on one H200 in the 26th
session (launch arguments kept by value: ``compile._ptr`` / ``_i32``); 28.1-29.2 us in the 27th, where torch.mm's
eager call took 20.3 us (the DSL's marshalling kept, ``CompiledKernel._invoke``; torch's raw stream query; the
operands' metadata read once).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from .config import L2_HINTS, SMEM_CAPACITY_SM90, TILE_N_CHOICES, GemmConfig


class HopperGemmBF16:
    """``y[:M] = x[:M] @ w.T``; M, N and K are run-time arguments. See the module docstring.

    Usage::

        gemm = HopperGemmBF16(config=GemmConfig())
        compiled = cute.compile(gemm, x_ptr, w_ptr, y_ptr, Int32(M), Int32(N), Int32(K), stream)
        compiled(x_ptr, w_ptr, y_ptr, Int32(M), Int32(N), Int32(K), stream)
    """

    def __init__(self, N: int | None = None, K: int | None = None, config: GemmConfig | None = None):
        config = config or GemmConfig()
        config.validate()
        self.config = config
        if N is not None and K is not None:
            config.check_shape(N, K)
            self.bind_shape(int(N), int(K))
        self.a_dtype = cutlass.BFloat16
        self.b_dtype = cutlass.BFloat16
        self.c_dtype = cutlass.BFloat16
        self.acc_dtype = cutlass.Float32
        self.tile_shape_mnk = (config.tile_m, config.tile_n, config.tile_k)
        self.epi_tile = (config.tile_m, config.epi_tile_n)
        self.epi_stage = config.epi_stages

        self.threads_per_warpgroup = 128
        self.num_consumer_wg = config.consumer_warpgroups
        self.num_mma_threads = self.num_consumer_wg * self.threads_per_warpgroup
        self.threads_per_cta = self.threads_per_warpgroup * (1 + self.num_consumer_wg)
        self.producer_warp_id = 0
        self.epi_store_warp_id = 4  # first warp of the first consumer warpgroup
        self.producer_regs = 40
        self.consumer_regs = 232
        self.buffer_align_bytes = 1024

        ab_bytes = (config.tile_m + config.tile_n) * config.tile_k * 2
        epi_bytes = config.tile_m * config.epi_tile_n * 2 * config.epi_stages
        fit = (SMEM_CAPACITY_SM90 - 1024 - epi_bytes) // ab_bytes
        self.ab_stage = config.ab_stages or fit
        if self.ab_stage < 2 or self.ab_stage > fit:
            raise ValueError(f"ab_stages={self.ab_stage} does not fit (at most {fit}, at least 2)")
        self.epilog_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)
        self.cluster_m = config.cluster_m
        self.faults = frozenset()  # fault-injected builds: the GEMM-RS kernels' (kernel.fused.rs_protocol)

    def bind_shape(self, n, k) -> None:
        """N and K of what is traced next: Python ints, or the kernel's run-time ``Int32`` arguments (bound on
        the host side before ``host_setup`` and again at the top of the kernel body, so every helper reads
        the values of the region it is traced in)."""
        self.N, self.K = n, k
        self.k_tile_cnt = k // self.config.tile_k
        self.num_n_tiles = (n + self.config.tile_n - 1) // self.config.tile_n

    # --- host side --------------------------------------------------------------------------------
    def _setup(self):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            self.acc_dtype,
            (self.num_consumer_wg, 1, 1),
            tiler_mn=(64, self.tile_shape_mnk[1]),
        )
        row_major = LayoutEnum.ROW_MAJOR
        self.a_smem_layout_staged = sm90_utils.make_smem_layout_a(
            row_major, self.tile_shape_mnk, self.a_dtype, self.ab_stage
        )
        self.b_smem_layout_staged = sm90_utils.make_smem_layout_b(
            row_major, self.tile_shape_mnk, self.b_dtype, self.ab_stage
        )
        self.epi_smem_layout_staged = sm90_utils.make_smem_layout_epi(
            self.c_dtype, row_major, self.epi_tile, self.epi_stage
        )

    @cute.jit
    def host_setup(self, x_ptr: cute.Pointer, w_ptr: cute.Pointer, c_ptr: cute.Pointer, m: cutlass.Int32,
                   c_rows=None):
        """Host side, shared by every kernel: the tensors over x (M x K), w (N x K) and the C tile target
        (``c_rows`` x N at ``c_ptr``; default M rows), their TMA atoms, the persistent grid over the M x N
        tiles and the shared-storage struct.
        Returns ((atom_a, tensor_a, atom_b, tensor_b, atom_c, tensor_c), num_m_tiles, grid_x); with
        ``cluster_m`` > 1, ``num_m_tiles`` is rounded up to whole clusters (see :meth:`tile_coord`)."""
        self._setup()
        N, K = self.N, self.K
        mA = cute.make_tensor(x_ptr, cute.make_layout((m, K), stride=(K, 1)))
        mB = cute.make_tensor(w_ptr, cute.make_layout((N, K), stride=(K, 1)))
        mC = cute.make_tensor(c_ptr, cute.make_layout((m if c_rows is None else c_rows, N), stride=(N, 1)))

        tma_atom_a, tma_tensor_a = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(),
            mA,
            cute.slice_(self.a_smem_layout_staged, (None, None, 0)),
            (self.tile_shape_mnk[0], self.tile_shape_mnk[2]),
        )
        if cutlass.const_expr(self.cluster_m > 1):  # each CTA of the cluster loads 1/cluster_m of B, to all of them
            tma_atom_b, tma_tensor_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp(),
                mB,
                cute.slice_(self.b_smem_layout_staged, (None, None, 0)),
                (self.tile_shape_mnk[1], self.tile_shape_mnk[2]),
                num_multicast=self.cluster_m,
            )
        else:
            tma_atom_b, tma_tensor_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(),
                mB,
                cute.slice_(self.b_smem_layout_staged, (None, None, 0)),
                (self.tile_shape_mnk[1], self.tile_shape_mnk[2]),
            )
        tma_atom_c, tma_tensor_c = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mC,
            cute.slice_(self.epi_smem_layout_staged, (None, None, 0)),
            self.epi_tile,
        )

        num_m_tiles = (m + self.tile_shape_mnk[0] - 1) // self.tile_shape_mnk[0]
        if cutlass.const_expr(self.cluster_m > 1):  # whole clusters: a last odd M tile gets an idle (clipped) twin
            num_m_tiles = (num_m_tiles + self.cluster_m - 1) // self.cluster_m * self.cluster_m
        num_tiles = num_m_tiles * self.num_n_tiles
        grid_x = cutlass.min(num_tiles, self.config.sm_count)

        @cute.struct
        class SharedStorage:
            mainloop_barriers: cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem_layout_staged)],
                self.buffer_align_bytes,
            ]
            sB: cute.struct.Align[
                cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem_layout_staged)],
                self.buffer_align_bytes,
            ]
            sC: cute.struct.Align[
                cute.struct.MemRange[self.c_dtype, cute.cosize(self.epi_smem_layout_staged)],
                self.buffer_align_bytes,
            ]

        self.shared_storage = SharedStorage
        return ((tma_atom_a, tma_tensor_a, tma_atom_b, tma_tensor_b, tma_atom_c, tma_tensor_c), num_m_tiles,
                grid_x)


    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        self.bind_shape(n, k)
        atoms, num_m_tiles, grid_x = self.host_setup(x_ptr, w_ptr, y_ptr, m)
        self.kernel(
            *atoms,
            self.tiled_mma,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            num_m_tiles,
            n,
            k,
        ).launch(**self.launch_shape(grid_x, stream))

    def launch_shape(self, grid_x, stream) -> dict:
        """The launch arguments of every kernel: ``grid_x`` CTAs of ``threads_per_cta``, one per SM, in clusters of
        ``cluster_m`` along x when the config has them."""
        shape = dict(grid=[grid_x, 1, 1], block=[self.threads_per_cta, 1, 1], min_blocks_per_mp=1, stream=stream)
        if self.cluster_m > 1:
            shape["cluster"] = [self.cluster_m, 1, 1]
        return shape

    # --- device side ------------------------------------------------------------------------------
    @cute.jit
    def tile_coord(self, tile_idx: cutlass.Int32, num_m_tiles: cutlass.Int32):
        """Linear tile index -> (m_tile, n_tile), grouped raster of ``group_n`` column tiles. With ``cluster_m`` > 1
        (``num_m_tiles`` whole clusters): index ``c * cluster_m + r`` is M tile ``cluster_m * i + r`` of the column
        tile that cluster tile ``c`` takes in the raster of the (M / cluster_m) x N cluster tiles; a CTA's indices
        ``bidx + j * gdim`` keep its rank in the cluster ``r = bidx % cluster_m`` (gdim is whole clusters), so the
        CTAs of a cluster run the same column tile, step for step."""
        if cutlass.const_expr(self.cluster_m > 1 and "cluster_unaware_schedule" not in self.faults):
            cluster_tile = tile_idx // self.cluster_m
            pair_m, n_tile = self.raster_coord(cluster_tile, num_m_tiles // self.cluster_m)
            return pair_m * self.cluster_m + (tile_idx - cluster_tile * self.cluster_m), n_tile
        return self.raster_coord(tile_idx, num_m_tiles)

    @cute.jit
    def raster_coord(self, tile_idx: cutlass.Int32, num_m_tiles: cutlass.Int32):
        """The grouped raster of :meth:`tile_coord` over ``num_m_tiles`` x N tiles."""
        group_n = self.config.group_n
        tiles_per_group = num_m_tiles * group_n
        group = tile_idx // tiles_per_group
        local = tile_idx - group * tiles_per_group
        first_n = group * group_n
        cols = cutlass.min(self.num_n_tiles - first_n, group_n)
        m_tile = local // cols
        n_tile = first_n + (local - m_tile * cols)
        return m_tile, n_tile

    @cute.jit
    def prologue(self, tma_atom_a, mA_mk, tma_atom_b, mB_nk, tma_atom_c, mC_mn, tiled_mma: cute.TiledMma,
                 a_smem_layout_staged, b_smem_layout_staged, epi_smem_layout_staged):
        """Every CTA's set-up, shared by the GEMM and the GEMM-RS kernels: TMA descriptor prefetch, shared
        memory, the TMA->wgmma mainloop pipeline (barriers initialised, not yet waited on), the TMA and
        MMA partitions, the accumulator fragment. The TMA partitions come as ``(tAsA, tAgA, tBsB, tBgB, sA)``
        (``sA``, the A stages, for kernels whose A tiles do not sit on the M-tile grid; with ``cluster_m`` > 1 a sixth
        entry, the multicast mask of the B loads: this CTA's share of B goes to every CTA of the cluster)."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

        if warp_idx == self.producer_warp_id:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        a_smem_layout = cute.slice_(a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(b_smem_layout_staged, (None, None, 0))
        tma_copy_bytes = cute.size_in_bytes(self.a_dtype, a_smem_layout) + cute.size_in_bytes(
            self.b_dtype, b_smem_layout
        )

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        producer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread)
        # a stage is free once every consumer warp of every CTA its loads fill has released it (in a cluster: the
        # B share this CTA multicasts lands in each CTA of the cluster)
        releasing_ctas = 1 if "cluster_local_release" in self.faults else self.cluster_m
        consumer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_consumer_wg * 4 * releasing_ctas)
        mainloop_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mainloop_barriers.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=producer_group,
            consumer_group=consumer_group,
            tx_count=tma_copy_bytes,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
            defer_sync=True,
        )
        if cutlass.const_expr(self.cluster_m > 1):
            pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_layout(), is_relaxed=True)
        else:
            pipeline.pipeline_init_arrive()

        sA = storage.sA.get_tensor(a_smem_layout_staged.outer, swizzle=a_smem_layout_staged.inner)
        sB = storage.sB.get_tensor(b_smem_layout_staged.outer, swizzle=b_smem_layout_staged.inner)
        sC = storage.sC.get_tensor(epi_smem_layout_staged.outer, swizzle=epi_smem_layout_staged.inner)

        # (bM, bK, RestM, RestK), (bN, bK, RestN, RestK), (bM, bN, RestM, RestN)
        gA = cute.local_tile(mA_mk, cute.slice_(self.tile_shape_mnk, (None, 0, None)), (None, None))
        gB = cute.local_tile(mB_nk, cute.slice_(self.tile_shape_mnk, (0, None, None)), (None, None))
        gC = cute.local_tile(mC_mn, cute.slice_(self.tile_shape_mnk, (None, None, 0)), (None, None))

        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_atom_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
        )
        b_rank = 0
        if cutlass.const_expr(self.cluster_m > 1):
            b_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_atom_b, b_rank, cute.make_layout(self.cluster_m), cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2)
        )

        warp_group_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_warpgroup)
        mma_thread_layout = cute.make_layout(self.num_consumer_wg, stride=self.threads_per_warpgroup)
        thr_mma = tiled_mma.get_slice(mma_thread_layout(warp_group_idx - 1))
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        tCgC = thr_mma.partition_C(gC[(None, None, 0, 0)])
        accumulators = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)
        tma_parts = (tAsA, tAgA, tBsB, tBgB, sA)
        if cutlass.const_expr(self.cluster_m > 1):  # the B loads go to every CTA of the cluster
            tma_parts = tma_parts + (cutlass.Int16((1 << self.cluster_m) - 1),)
        return (tidx, bidx, gdim, warp_idx, warp_group_idx, mainloop_pipeline, sC, gC, tma_parts,
                tCrA, tCrB, accumulators)

    def cluster_layout(self):
        """The cluster's CTAs along (M, N): ``(cluster_m, 1)``."""
        return cute.make_layout((self.cluster_m, 1))

    @cute.jit
    def init_wait(self):
        """After :meth:`prologue`: every thread of the CTA (of the cluster, with ``cluster_m`` > 1) past the
        barriers' initialisation, before any of them is used."""
        if cutlass.const_expr(self.cluster_m > 1):
            pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_layout())
        else:
            pipeline.pipeline_init_wait()

    @cute.jit
    def k_tiles_of(self, tma_parts, tile_idx: cutlass.Int32, schedule):
        """The TMA source k-tiles of A and B for linear tile ``tile_idx`` (``schedule``: what the kernel's
        tile order needs; here ``num_m_tiles``): ``(tAgA_m, tBgB_n)``, each (TMA, k_tile)."""
        tAgA, tBgB = tma_parts[1], tma_parts[3]
        m_tile, n_tile = self.tile_coord(tile_idx, schedule)
        return tAgA[(None, m_tile, None)], tBgB[(None, n_tile, None)]

    @cute.jit
    def produce(self, tma_atom_a, tma_atom_b, tma_parts, mainloop_pipeline, bidx, gdim, num_tiles, schedule,
                splits=None):
        """The producer warp: TMA loads of A and B k-tiles into the pipeline stages, tile after tile, in the
        order of :meth:`k_tiles_of` (each kernel's tile order). ``splits`` (a split-K build, run-time P): work
        units ``tile * P + part`` instead of tiles, each the k-tiles of :meth:`split_k_range`."""
        tAsA, tBsB = tma_parts[0], tma_parts[2]
        b_mask = tma_parts[5] if cutlass.const_expr(self.cluster_m > 1) else None
        producer_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
        if cutlass.const_expr(splits is None):
            tile_idx = bidx
            while tile_idx < num_tiles:
                tAgA_m, tBgB_n = self.k_tiles_of(tma_parts, tile_idx, schedule)
                for k_tile in range(self.k_tile_cnt):
                    self.load_stage(tma_atom_a, tma_atom_b, tAgA_m, tBgB_n, tAsA, tBsB, k_tile, mainloop_pipeline,
                                    producer_state, b_mask)
                    producer_state.advance()
                tile_idx += gdim
        else:
            unit = bidx
            while unit < num_tiles * splits:
                tile_idx = unit // splits
                k_first, k_count = self.split_k_range(unit - tile_idx * splits, splits)
                tAgA_m, tBgB_n = self.k_tiles_of(tma_parts, tile_idx, schedule)
                for kk in range(k_count):
                    self.load_stage(tma_atom_a, tma_atom_b, tAgA_m, tBgB_n, tAsA, tBsB, k_first + kk,
                                    mainloop_pipeline, producer_state)
                    producer_state.advance()
                unit += gdim
        mainloop_pipeline.producer_tail(producer_state)

    @cute.jit
    def load_stage(self, tma_atom_a, tma_atom_b, tAgA_m, tBgB_n, tAsA, tBsB, k_tile, mainloop_pipeline,
                   producer_state, b_mask=None):
        """One pipeline stage: TMA loads of k-tile ``k_tile`` of A and of B, once the stage is free; with the
        config's ``l2_hints``, the L2 eviction priorities :data:`kernel.fused.config.L2_HINTS` names; with
        ``b_mask`` (a clustered config), this CTA's share of B multicast to the CTAs of the mask."""
        mainloop_pipeline.producer_acquire(producer_state)
        barrier = mainloop_pipeline.producer_get_barrier(producer_state)
        if cutlass.const_expr(b_mask is not None):
            cute.copy(tma_atom_a, tAgA_m[(None, k_tile)], tAsA[(None, producer_state.index)], tma_bar_ptr=barrier)
            cute.copy(tma_atom_b, tBgB_n[(None, k_tile)], tBsB[(None, producer_state.index)], tma_bar_ptr=barrier,
                      mcast_mask=b_mask)
        elif cutlass.const_expr(self.config.l2_hints != ""):
            hint_a, hint_b = L2_HINTS[self.config.l2_hints]
            cute.copy(tma_atom_a, tAgA_m[(None, k_tile)], tAsA[(None, producer_state.index)], tma_bar_ptr=barrier,
                      cache_policy=cutlass.Int64(hint_a))
            cute.copy(tma_atom_b, tBgB_n[(None, k_tile)], tBsB[(None, producer_state.index)], tma_bar_ptr=barrier,
                      cache_policy=cutlass.Int64(hint_b))
        else:
            cute.copy(tma_atom_a, tAgA_m[(None, k_tile)], tAsA[(None, producer_state.index)], tma_bar_ptr=barrier)
            cute.copy(tma_atom_b, tBgB_n[(None, k_tile)], tBsB[(None, producer_state.index)], tma_bar_ptr=barrier)
        mainloop_pipeline.producer_commit(producer_state)

    @cute.jit
    def split_k_range(self, part: cutlass.Int32, splits: cutlass.Int32):
        """``(first k-tile, k-tile count)`` of K part ``part`` of ``splits`` (1 <= splits <= k-tiles): the parts
        tile the k-tiles in order, each at least one, the last ones one longer when they do not divide evenly."""
        first = part * self.k_tile_cnt // splits
        return first, (part + 1) * self.k_tile_cnt // splits - first

    @cute.jit
    def consumer_pipelines(self, tCrA: cute.Tensor):
        """The consumer warpgroups' pipeline state, shared by every kernel: the read and release positions in
        the TMA->wgmma ring, the k-blocks of a k-tile, and the bulk-group ring of the TMA-store epilogue."""
        read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        num_k_blocks = cute.size(tCrA, mode=[2])

        store_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads)
        tma_store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stage, producer_group=store_group
        )
        return read_state, release_state, num_k_blocks, tma_store_pipeline

    @cute.jit
    def mma_tile(self, tiled_mma: cute.TiledMma, accumulators: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor,
                 mainloop_pipeline, read_state, release_state, num_k_blocks: cutlass.Constexpr, k_tiles=None):
        """The consumer warpgroups' mainloop of one tile, shared by every kernel: ``accumulators = A_tile @
        B_tile.T`` over all k-tiles, wgmma from the pipeline's stages, one batch in flight; each stage is
        released once the batch reading it has retired. Returns ``(read_state, release_state)`` advanced: the
        caller must assign them (``read_state, release_state = self.mma_tile(...)``), or its tile loop does not
        carry them from one tile to the next (every tile would restart at stage 0, phase 0). It also sets
        ``tiled_mma``'s ACCUMULATE field inside the caller's loop: the kernel body must not call methods on
        ``tiled_mma`` itself (pass it to helpers), or a branch would carry that in-loop value out. ``k_tiles``: how
        many k-tiles (a split-K unit's count, at least 1; default all of K)."""
        accumulators.fill(0.0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.fence()
        for k_tile in range(self.k_tile_cnt if k_tiles is None else k_tiles):
            mainloop_pipeline.consumer_wait(read_state)
            for k_block in cutlass.range_constexpr(num_k_blocks):
                k_block_coord = (None, None, k_block, read_state.index)
                cute.gemm(tiled_mma, accumulators, tCrA[k_block_coord], tCrB[k_block_coord], accumulators)
            cute.nvgpu.warpgroup.commit_group()
            if k_tile > 0:
                # the previous batch has retired: its stage may be refilled
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop_pipeline.consumer_release(release_state)
                release_state.advance()
            read_state.advance()
        cute.nvgpu.warpgroup.wait_group(0)
        mainloop_pipeline.consumer_release(release_state)
        release_state.advance()
        return release_state, read_state

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
        n: cutlass.Int32,
        k: cutlass.Int32,
    ):
        self.bind_shape(n, k)
        tidx, bidx, gdim, warp_idx, warp_group_idx, mainloop_pipeline, sC, gC, tma_parts, tCrA, tCrB, accumulators = (
            self.prologue(tma_atom_a, mA_mk, tma_atom_b, mB_nk, tma_atom_c, mC_mn, tiled_mma,
                          a_smem_layout_staged, b_smem_layout_staged, epi_smem_layout_staged))
        num_tiles = num_m_tiles * self.num_n_tiles
        self.init_wait()

        if warp_group_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == self.producer_warp_id:
                self.produce(tma_atom_a, tma_atom_b, tma_parts, mainloop_pipeline, bidx, gdim, num_tiles, num_m_tiles)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            consumer_tidx = tidx - self.threads_per_warpgroup
            read_state, release_state, num_k_blocks, tma_store_pipeline = self.consumer_pipelines(tCrA)

            tile_idx = bidx
            tiles_done = cutlass.Int32(0)
            while tile_idx < num_tiles:
                m_tile, n_tile = self.tile_coord(tile_idx, num_m_tiles)
                release_state, read_state = self.mma_tile(tiled_mma, accumulators, tCrA, tCrB, mainloop_pipeline,
                                                          read_state, release_state, num_k_blocks)
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
                tiles_done += 1
                tile_idx += gdim
            tma_store_pipeline.producer_tail()

    @cute.jit
    def epilogue(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        sC: cute.Tensor,
        gC_tile: cute.Tensor,
        tma_store_pipeline: pipeline.PipelineTmaStore,
        consumer_tidx: cutlass.Int32,
        warp_idx: cutlass.Int32,
        tiles_done: cutlass.Int32,
        store_atoms=None,
        store_index=None,
        epi_range=None,
    ):
        """Accumulators of one (BM, BN) tile -> bf16 -> shared -> TMA store into ``gC_tile``.

        Called by all consumer threads; the TMA store clips rows past the C tensor. ``store_atoms``: TMA
        store atoms of other targets with the same tiling as C (their coordinates are ``gC_tile``'s); the
        store then goes through ``store_atoms[store_index]`` (run-time index) instead of ``tma_atom_c``.
        ``epi_range`` (``(lo, hi, stored_before)``, run-time): only the epilogue subtiles ``lo <= i < hi`` (column
        slices ``epi_tile_n`` wide) are stored, ``stored_before`` the subtiles this CTA stored before them
        (``tiles_done`` is then unused): a split-K unit's slice of its tile.
        """
        tiled_copy_r2s = self.r2s_copy(tiled_mma)
        thr_copy_r2s = tiled_copy_r2s.get_slice(consumer_tidx)
        tRS_sC = thr_copy_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, PIPE)
        tRS_rAcc = tiled_copy_r2s.retile(accumulators)
        rC_shape = cute.shape(thr_copy_r2s.partition_S(sC))
        tRS_rC = cute.make_rmem_tensor(rC_shape[:3], self.acc_dtype)
        tRS_rC_out = cute.make_rmem_tensor(rC_shape[:3], self.c_dtype)

        gC_epi = cute.zipped_divide(gC_tile, self.epi_tile)
        bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
            tma_atom_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi
        )
        epi_tile_num = cute.size(gC_epi, mode=[1])
        epi_tile_shape = gC_epi.shape[1]
        epi_tile_layout = cute.make_layout(epi_tile_shape, stride=(epi_tile_shape[1], 1))
        if cutlass.const_expr(epi_range is None):
            num_prev = tiles_done * epi_tile_num
            for epi_idx in cutlass.range_constexpr(epi_tile_num):
                self.store_subtile(tiled_copy_r2s, tRS_rAcc, tRS_rC, tRS_rC_out, tRS_sC, bSG_sC, bSG_gC,
                                   epi_tile_layout, epi_idx, num_prev, tma_atom_c,
                                   tma_store_pipeline, warp_idx, store_atoms, store_index)
        else:
            lo, hi, stored_before = epi_range
            ring_base = stored_before - lo
            for epi_idx in cutlass.range_constexpr(epi_tile_num):
                if lo <= epi_idx and epi_idx < hi:
                    self.store_subtile(tiled_copy_r2s, tRS_rAcc, tRS_rC, tRS_rC_out, tRS_sC, bSG_sC, bSG_gC,
                                       epi_tile_layout, epi_idx, ring_base,
                                       tma_atom_c, tma_store_pipeline, warp_idx, store_atoms, store_index)

    @cute.jit
    def store_subtile(self, tiled_copy_r2s, tRS_rAcc, tRS_rC, tRS_rC_out, tRS_sC, bSG_sC, bSG_gC, epi_tile_layout,
                      epi_idx: cutlass.Constexpr, ring_base, tma_atom_c, tma_store_pipeline, warp_idx, store_atoms,
                      store_index):
        """One epilogue subtile: its accumulators -> bf16 -> shared (buffer ``(ring_base + epi_idx) % epi_stage`` of
        the ring) -> TMA."""
        size_tRS_rC = cute.size(tRS_rC)
        for v in cutlass.range_constexpr(size_tRS_rC):
            tRS_rC[v] = tRS_rAcc[epi_idx * size_tRS_rC + v]
        tRS_rC_out.store(tRS_rC.load().to(self.c_dtype))
        epi_buffer = (ring_base + epi_idx) % self.epi_stage
        cute.copy(tiled_copy_r2s, tRS_rC_out, tRS_sC[(None, None, None, epi_buffer)])
        # stmatrix writes are read next by the TMA engine (async proxy)
        cute.arch.fence_proxy("async.shared", space="cta")
        self.epilog_barrier.arrive_and_wait()
        gmem_coord = epi_tile_layout.get_hier_coord(epi_idx)
        if warp_idx == self.epi_store_warp_id:
            if cutlass.const_expr(store_atoms is None):
                cute.copy(tma_atom_c, bSG_sC[(None, epi_buffer)], bSG_gC[(None, gmem_coord)])
            else:
                for q in cutlass.range_constexpr(len(store_atoms)):
                    if store_index == q:
                        cute.copy(store_atoms[q], bSG_sC[(None, epi_buffer)], bSG_gC[(None, gmem_coord)])
            tma_store_pipeline.producer_commit()
            tma_store_pipeline.producer_acquire()
        self.epilog_barrier.arrive_and_wait()

    def r2s_copy(self, tiled_mma: cute.TiledMma):
        """The epilogue's register -> shared tiled copy (stmatrix); ``r2s_copy(mma).retile(accumulators)`` is the
        accumulators in epilogue order: subtile ``i``'s values of a thread are elements ``i * n .. i * n + n - 1``."""
        copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(
            LayoutEnum.ROW_MAJOR, elem_ty_d=self.c_dtype, elem_ty_acc=self.acc_dtype
        )
        copy_atom_c = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype)
        tiled_copy_c_atom = cute.make_tiled_copy_C_atom(copy_atom_c, tiled_mma)
        return cute.make_tiled_copy_S(copy_atom_r2s, tiled_copy_c_atom)


def smem_bytes(config: GemmConfig, ab_stage: int) -> int:
    """Shared memory one CTA uses (for docs and tests)."""
    ab = (config.tile_m + config.tile_n) * config.tile_k * 2 * ab_stage
    epi = config.tile_m * config.epi_tile_n * 2 * config.epi_stages
    return ab + epi + 16 * ab_stage + 3 * 1024


__all__ = ["GemmConfig", "HopperGemmBF16", "SMEM_CAPACITY_SM90", "TILE_N_CHOICES", "smem_bytes"]
