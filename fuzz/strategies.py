"""Hypothesis strategies for cases. They shrink toward the simple case: M=1 and boundary values first,
gaussian inputs, one call, no skew, seed 0, the first shape of the family.

They are built to reach each bug class in a handful of examples (the mutation meta-test, mutants/meta.py,
measures it): a multi-call case gives every call a different input kind (so few cases cover every kind,
and a NaN or a stale value left behind by one call meets different data in the next), may come back to
its first M (alternation: 1024, 129, 1024), and a bad-call case shrinks to "all" (every bad call of
BAD_CALLS on one instance) rather than leaving each bad call to chance."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from kernel.interface import Eligibility
from oracle.inputs import KINDS

from .bad_calls import BAD_CALLS
from .case import CAPACITY_BADS, Case
from .layouts import layouts_for

# (N, K) listed: down-projection / attention-output shapes (hidden N, per-rank K slice), scaled to the
# machine; K a multiple of 64, N including non-multiples of 128. Drawn beside tails and model sizes (shapes()).
SHAPES = {
    "cpu": [(64, 64), (128, 128), (192, 64), (256, 128), (224, 256)],
    # realistic N (hidden 7168 / 4096) with the per-rank K of TP 4..16; the per-case cost stays seconds,
    # also for the unfused path over gloo on shared-gpu (host-staged)
    "gpu": [(512, 256), (1024, 512), (1536, 704), (4096, 512), (7168, 1024)],
}
#: Ranges N and K are drawn from for tails (K % 64 != 0, N % 256 != 0, odd N, N below one 128- or 256-wide
#: tile), where the implementation supports them. From 2: a (1, K) or (N, 1) tensor is contiguous whatever its
#: strides, so the bad-call table's layout entries would be valid calls there. CPU: about the listed shapes' cost.
TAIL_RANGES = {"cpu": ((2, 320), (2, 320)), "gpu": ((2, 2304), (2, 1088))}
#: Model sizes (GPU topologies only: the unfused path's cost on the CPU): hidden sizes of current models
#: (gpt-oss 2880, Llama 4096 / 8192, 5120, DeepSeek-V3 7168) with the per-rank K of the output projection
#: at TP 2..16 (K = hidden // TP).
MODEL_HIDDEN = (2880, 4096, 5120, 7168, 8192)
MODEL_TP = (2, 16)
#: Where a shape is drawn from, simplest first (Hypothesis shrinks toward the first).
SHAPE_SOURCES = {"cpu": ("listed", "tails"), "gpu": ("listed", "tails", "model")}
#: An undeclared shape drawn for a compute case is kept (not moved to a supported one) one time in this many.
UNSUPPORTED_ODDS = 3
#: How far :func:`nearest_supported` looks (N, K) for a supported shape above a drawn one.
SNAP_WINDOW = (16, 128)
#: Storage offsets (elements) of the x and w views a compute case passes: 0 (plain tensors) first, then
#: 16-byte aligned offsets (valid views that must be computed right).
VIEW_OFFSETS = (0, 8, 4096)
MAX_M = {"cpu": 8192, "gpu": 8192}


def machine(topology: str) -> str:
    return "cpu" if topology == "cpu" else "gpu"


def boundary_ms(world_size: int, max_M: int) -> list[int]:
    W = world_size
    cands = [1, W - 1, W, W + 1, 2 * W - 1, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4097, 8191,
             max_M - 1, max_M]
    out = []
    for m in cands:
        if 1 <= m <= max_M and m not in out:
            out.append(m)
    return out


def m_values(world_size: int, max_M: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(boundary_ms(world_size, max_M)), st.integers(1, max_M))


def all_shapes(N: int, K: int) -> Eligibility:
    """The default declaration: every N, K >= 1 (GemmRsImplementation.supports)."""
    return Eligibility(N >= 1 and K >= 1, "" if N >= 1 and K >= 1 else f"N={N}, K={K}: both must be >= 1")


def _declared(impl: str, query: str):
    """The class-level query ``query`` the implementation ``impl`` (a registry name or ``module:attribute``)
    declares, or None: a factory without it, or one that does not load here (the ranks load it too, and report
    why they cannot: a harness error)."""
    from kernel.registry import load_implementation

    try:
        factory = load_implementation(impl)
    except Exception:  # noqa: BLE001 — reported by the ranks, see above
        return None
    return getattr(factory, query, None)


def declared_support(impl: str) -> Callable[[int, int], Eligibility]:
    """The ``supports(N, K)`` the implementation ``impl`` declares
    (kernel.interface.GemmRsImplementation.supports); :func:`all_shapes` for a factory without one."""
    return _declared(impl, "supports") or all_shapes


def declared_paths(impl: str, world_size: int) -> tuple:
    """The kernel paths the implementation ``impl`` declares at ``world_size``
    (kernel.interface.GemmRsImplementation.declared_paths); none for a factory without the query."""
    query = _declared(impl, "declared_paths")
    return tuple(query(world_size)) if query is not None else ()


def declared_counter_bits(impl: str) -> int | None:
    """The width of the call counter the implementation ``impl`` keeps (``call_counter_bits``), or None."""
    return _declared(impl, "call_counter_bits")


def declared_waiver(impl: str, clause: str) -> str | None:
    """The reason the implementation ``impl``'s class gives for waiving the contract clause ``clause``
    (``waived_clauses``), or None."""
    return (_declared(impl, "waived_clauses") or {}).get(clause)


#: The input kinds every declared kernel path is called on at its own M, in this order (gaussian first: its
#: tokens are also computed in the batch of the other M). ``cancel`` there is what shows split-K parts summed in
#: reduced precision: from 12-01 to 12-03 the cancel call was the one at the *other* M (another path), and the
#: GPU fault build ``bf16_parts`` got through the ci gate (22nd session's GPU kill matrix).
PATH_KINDS = ("gaussian", "cancel", "exact")


def path_cases(path, index: int) -> list[Case]:
    """The cases of one declared kernel path (:func:`declared_paths`): a compute case calling it -- at the path's
    own M -- on gaussian, cancellation and exact inputs (:data:`PATH_KINDS`), with a call of another M (the 64-row
    tiles' M = 1, or 129) after the first, the first call's tokens also computed inside a batch of that other M
    (batch invariance across the two paths, on gaussian inputs: honoured or waived by the instance with its
    reason), then, for a path with device state of its own (``replay``), a graph of it replayed with inputs
    changed in place. Seeds fixed per path: every run checks the same calls."""
    max_M = max(path.M, 512)
    other = 1 if path.M > 1 else 129
    ms = [path.M, other] + [path.M] * (len(PATH_KINDS) - 1)
    cases = [Case("compute", 9000 + index, path.N, path.K, max_M, ms, "gaussian", "guarded",
                  repeat=2, kinds=[PATH_KINDS[0], "exact", *PATH_KINDS[1:]], batch_m=other)]
    if path.replay:
        cases.append(Case("graph", 9100 + index, path.N, path.K, max_M, [path.M], "exact", "guarded", repeat=3))
    return cases


#: The counter-wrap cases (fuzz/families/wrap.py), per machine: (wrap, N, K, max_M, ms). The call at index
#: WRAP_LEAD (2) is the first past the boundary; on the GPU it is the first call at its M (flag words no call touched
#: yet: still 0), and on the 2^32 side a split-K call of the fused kernel (its part words too); the call after it
#: waits on done words of the epoch before the boundary (2^31: the signed order turns there).
WRAP_PLAN = {
    "cpu": [("signed", 128, 128, 256, [1, 64, 255, 129, 1]), ("unsigned", 256, 128, 256, [1, 64, 255, 129, 1])],
    "gpu": [("signed", 512, 256, 8192, [1, 1000, 2048, 8192, 1]), ("unsigned", 2560, 8192, 512, [1, 129, 448, 448, 1])],
}
WRAP_KINDS = ["gaussian", "exact", "exact", "exact", "cancel"]


def wrap_cases(world_size: int, topology: str = "cpu",
               supports: Callable[[int, int], Eligibility] | None = None) -> list[Case]:
    """The fixed counter-wrap cases (one per boundary), with rank W-1 late by 30 ms before each call (W > 1):
    its peers run ahead into the calls after the boundary while it still reads the ones before. A shape the
    implementation does not support moves to the nearest it does (else the first listed one it supports)."""
    m = machine(topology)
    supports = supports or all_shapes
    cases = []
    for i, (wrap, N, K, max_M, ms) in enumerate(WRAP_PLAN[m]):
        N, K = supported_shape(supports, N, K, m)
        late = world_size - 1 if world_size > 1 else None
        cases.append(Case("wrap", 9500 + i, N, K, max_M, list(ms), "exact", "guarded", repeat=1,
                          kinds=list(WRAP_KINDS), late_rank=late, delay_ms=30 if late is not None else 0,
                          wrap=wrap))
    return cases


def shard_boundary_ms(world_size: int) -> list[int]:
    """M values where the last ranks run out of rows (M = W + 1, 2W + 1: S = 2, 3 with ranks holding none or
    part of a shard -- a row count ``M - r * S`` going negative without its clamp at 0), and their neighbours
    (2W - 1, 3W + 1), then W + 1 again after the largest (a stale row of the call before shows there)."""
    W = world_size
    return [W + 1, 2 * W + 1, 2 * W - 1, 3 * W + 1, W + 1]


#: The shard-boundary case's seed and capacity.
SHARD_BOUNDARY_SEED, SHARD_BOUNDARY_MAX_M = 9600, 512


def shard_boundary_cases(world_size: int, topology: str = "cpu",
                         supports: Callable[[int, int], Eligibility] | None = None) -> list[Case]:
    """The fixed shard-boundary case: every rank of the whole world, ``out=`` a guarded sentinel buffer, the M of
    :func:`shard_boundary_ms` in turn on exact and gaussian inputs (padding rows, an empty rank's rows and the
    guards checked on every call). Random draws reach these M at W >= 4 about once a run, a TP subgroup's
    boundaries almost never. A shape the implementation does not support moves to the nearest it does."""
    m = machine(topology)
    supports = supports or all_shapes
    N, K = supported_shape(supports, *SHAPES[m][0], m)
    ms = shard_boundary_ms(world_size)
    kinds = [("exact", "gaussian")[i % 2] for i in range(len(ms))]
    return [Case("compute", SHARD_BOUNDARY_SEED, N, K, SHARD_BOUNDARY_MAX_M, ms, "exact", "guarded", repeat=1,
                 kinds=kinds)]


#: One rank far later than the draw's skews (0, 5, 30, 100 ms) in every run (23rd session): a wait that gives up
#: after a timeout -- a spin that breaks out instead of trapping, a collective whose timeout error is swallowed --
#: and reduces without the late rank's rows, or with its stale ones, passes every drawn case when its timeout is
#: above 100 ms. 2 s: past any timeout short of a hang's (the fused kernels trap at 60 s).
LATE_RANK_SEED, LATE_RANK_MAX_M, LATE_RANK_DELAY_MS = 9900, 512, 2000
#: The late rank's delays a drawn case takes (100 ms: above any natural jitter of a loaded host).
DRAWN_DELAYS_MS = (0, 5, 30, 100)
#: The late rank's delays of the graph family's replays in a row (``fuzz.families.graph``, step 5) and of the
#: instances family's calls back to back: a few ms, enough for the peers to read before it writes (the far-late
#: cases are the compute family's and the fixed test's).
GRAPH_DELAYS_MS = (5, 30)


def late_rank_cases(world_size: int, topology: str = "cpu", supports: Callable[[int, int], Eligibility] | None = None,
                    aligned: bool = False) -> list[Case]:
    """The fixed far-late case: the whole world, its last rank :data:`LATE_RANK_DELAY_MS` late, one exact call at M
    = 2W + 1 (2W for an implementation that waives unaligned M) into a guarded sentinel buffer, on the machine's
    first listed shape (moved to the nearest supported one). None at W = 1: no peer to be late for."""
    if world_size < 2:
        return []
    m = machine(topology)
    N, K = supported_shape(supports or all_shapes, *SHAPES[m][0], m)
    M = 2 * world_size if aligned else 2 * world_size + 1
    return [Case("compute", LATE_RANK_SEED, N, K, LATE_RANK_MAX_M, [M], "exact", "guarded", repeat=1,
                 late_rank=world_size - 1, delay_ms=LATE_RANK_DELAY_MS)]


#: The fixed back-to-back case (32nd session): three exact calls launched with no wait between them, the last rank
#: :data:`BURST_DELAY_MS` late before each (on its stream), at Ms whose reads last (a drawn burst's Ms are often a
#: few rows): a rank that overwrites its partials before its peers finished reading the last call's -- a done wait
#: skipped -- shows in every run, not only where a draw made a burst.
BURST_SEED, BURST_MAX_M, BURST_DELAY_MS = 9950, 512, 5


def back_to_back_cases(world_size: int, topology: str = "cpu",
                       supports: Callable[[int, int], Eligibility] | None = None, aligned: bool = False) -> list[Case]:
    """The fixed back-to-back case: the whole world, its last rank :data:`BURST_DELAY_MS` late, the calls M = 512,
    385, 511 (512, 384, 512 for an implementation that waives unaligned M) once verified, then again on new inputs
    back to back (``burst``), into guarded sentinel buffers, on the machine's last listed shape (its largest N: the
    longest reads of a peer's partials; moved to the nearest supported one). None at W = 1: no peer reads a rank's
    data."""
    if world_size < 2:
        return []
    m = machine(topology)
    N, K = supported_shape(supports or all_shapes, *SHAPES[m][-1], m)
    ms = [512, 384, 512] if aligned else [512, 385, 511]
    return [Case("compute", BURST_SEED, N, K, BURST_MAX_M, ms, "exact", "guarded", repeat=1,
                 late_rank=world_size - 1, delay_ms=BURST_DELAY_MS, burst=True)]


#: The fixed whole-world dispatch case (30th session): the drawn dispatch cases are few in a ci run and draw TP
#: layouts, so a run's every one could land on groups of one rank, where ranks cannot disagree (seen: a shifted draw
#: let ``ShouldRunOnLocalRows`` -- ranks answering should_run from their own rows -- pass a ci run).
DISPATCH_FIXED_SEED, DISPATCH_FIXED_MAX_M = 9900, 512


def dispatch_crossover_cases(world_size: int, topology: str = "cpu",
                             supports: Callable[[int, int], Eligibility] | None = None,
                             aligned: bool = False) -> list[Case]:
    """The fixed dispatch case: the layer on the whole world, M = 1, 2W + 1 and the contract's default threshold's
    neighbours 127, 128, 129 (multiples of W for an implementation that waives unaligned M; the family adds both
    sides of every rank's own crossover), exact inputs, on the machine's first listed shape (moved to the nearest
    supported one), under an engine's tensor defaults (a fallback made at a call is made there)."""
    m = machine(topology)
    N, K = supported_shape(supports or all_shapes, *SHAPES[m][0], m)
    W = world_size
    ms = [1, 2 * W + 1, 127, 128, 129]
    if aligned:
        ms = list(dict.fromkeys(max(W, -(-M // W) * W) for M in ms))
    return [Case("dispatch", DISPATCH_FIXED_SEED, N, K, DISPATCH_FIXED_MAX_M, ms, "exact", "none", repeat=1,
                 defaults="engine")]


#: The smallest shapes (N = 1, K = 1, both), each beside the machine's first listed shape: a (1, K) weight, an
#: (M, 1) x and an (S, 1) result are where a GEMV fast path, a squeeze or a 16-byte row assumption breaks; the draw
#: never reaches them (TAIL_RANGES start at 2 for the bad-call table's layout entries).
SMALLEST_SEED, SMALLEST_MAX_M = 9700, 512


def smallest_shape_ms(world_size: int, aligned: bool = False) -> list[int]:
    """A ragged shard (2W + 1), one row (M = 1: every rank past the first empty), W + 1; with ``aligned`` (an
    implementation that waives unaligned M) the multiples of W nearest them: 2W, W, 3W."""
    W = world_size
    return [2 * W, W, 3 * W] if aligned else [2 * W + 1, 1, W + 1]


def smallest_shape_cases(world_size: int, topology: str = "cpu", aligned: bool = False) -> list[Case]:
    """The fixed smallest-shape cases, (1, K0), (N0, 1) and (1, 1) with (N0, K0) the machine's first listed shape:
    the whole world, ``out=`` a guarded sentinel buffer (for (1, 1): no ``out``, the result allocated by the call),
    exact, non-finite and gaussian inputs. A shape the implementation does not declare stays as it is: it must then
    be rejected with a typed error or take the fallback per can_run (the families' support check). (1, 1) is built
    and called under an engine's tensor defaults (``Case.defaults``), its calls under inference mode, no_grad and
    grad in turn (``Case.autograd``): a fallback made at construction or at the first call that takes it is made
    there, as in an engine (the drawn cases' first examples keep the process's defaults and mode)."""
    N0, K0 = SHAPES[machine(topology)][0]
    ms = smallest_shape_ms(world_size, aligned)
    kinds = ["exact", "nonfinite", "gaussian"]
    return [Case("compute", SMALLEST_SEED + i, N, K, SMALLEST_MAX_M, list(ms), "exact", out, repeat=1,
                 kinds=list(kinds), defaults=engine and "engine", autograd=engine and "rotate")
            for i, (N, K, out, engine) in enumerate(((1, K0, "guarded", None), (N0, 1, "guarded", None),
                                                     (1, 1, "none", True)))]


#: Model sizes in every run, on every topology (23rd session): the cpu draw's N and K stay at 320 and below (the
#: unfused path's cost there; model sizes are drawn on GPU topologies only), so a bug that shows only past a size -- a
#: K loop of 1024-deep chunks that drops a partial last one, N walked in 4096-wide blocks with the last partial block
#: never written, a 16-bit element index -- was out of the CPU gate's reach. (hidden, hidden / TP): DeepSeek-V3's
#: 7168 at TP 16 (K = 448; N past 4096 and 2^12, not a power of two), gpt-oss's 2880 at TP 2 (K = 1440: past
#: torch's CPU bf16 batch-kernel switch at 1024, a K tail past 1024, not a multiple of 64). At small M: a case's
#: cost is the weights (every rank builds the truth's W of N * K each; W = 8 on 2 cores: 50 s with a third shape,
#: 4096 x 2048).
MODEL_SHAPE_SEED, MODEL_SHAPE_MAX_M = 9800, 512
MODEL_SHAPES = ((7168, 448), (2880, 1440))


def model_shape_ms(world_size: int, aligned: bool = False) -> list[int]:
    """A ragged shard (2W + 1), one row (every rank past the first empty), 65 (past a 64-row tile); with
    ``aligned`` (an implementation that waives unaligned M) multiples of W: 2W, W, 8W."""
    W = world_size
    return [2 * W, W, 8 * W] if aligned else [2 * W + 1, 1, 65]


def model_shape_cases(world_size: int, aligned: bool = False) -> list[Case]:
    """The fixed model-size cases, one per :data:`MODEL_SHAPES` entry: the whole world, exact, small and gaussian
    inputs (a dropped rank hides on small values only from a loose tolerance), ``out=`` a guarded sentinel buffer
    (the last one: none, the call's own result). A shape the implementation does not declare stays as it is: it
    must then be rejected with a typed error or take the fallback per can_run (the families' support check)."""
    ms = model_shape_ms(world_size, aligned)
    kinds = ["exact", "small", "gaussian"]
    outs = ["guarded"] * (len(MODEL_SHAPES) - 1) + ["none"]
    return [Case("compute", MODEL_SHAPE_SEED + i, N, K, MODEL_SHAPE_MAX_M, list(ms), "exact", out, repeat=1,
                 kinds=list(kinds))
            for i, ((N, K), out) in enumerate(zip(MODEL_SHAPES, outs))]


def supported_shape(supports: Callable[[int, int], Eligibility], N: int, K: int, where: str) -> tuple[int, int]:
    """(N, K) itself where the implementation supports it, else the nearest supported shape above it, else the
    first listed shape of the machine ``where`` it supports (else (N, K): the family's support check then says why)."""
    if supports(N, K):
        return N, K
    return nearest_supported(supports, N, K) or next((sh for sh in SHAPES[where] if supports(*sh)), (N, K))


def nearest_supported(supports: Callable[[int, int], Eligibility], N: int, K: int) -> tuple[int, int] | None:
    """The supported (N', K') >= (N, K) nearest to it (K first: the smaller step) within SNAP_WINDOW, or None."""
    for dk in range(SNAP_WINDOW[1]):
        for dn in range(SNAP_WINDOW[0]):
            if supports(N + dn, K + dk):
                return N + dn, K + dk
    return None


def ms_near(favoured, world_size: int, max_M: int, *, max_size: int) -> st.SearchStrategy[list[int]]:
    """1..max_size M values, each one of ``favoured`` (those within max_M) or any valid M."""
    return st.lists(st.one_of(st.sampled_from([m for m in favoured if m <= max_M]), m_values(world_size, max_M)),
                    min_size=1, max_size=max_size)


def layouts(world_size: int) -> st.SearchStrategy[list[list[int]] | None]:
    """The world (shrinks to it) or one of the TP layouts of :func:`fuzz.layouts.layouts_for` (TP x DP
    partitions first; a non-contiguous group with ranks outside it last)."""
    choices = layouts_for(world_size)
    if not choices:
        return st.none()
    return st.one_of(st.none(), st.sampled_from(choices))


@st.composite
def shapes(draw, topology: str, supports: Callable[[int, int], Eligibility] | None = None,
           unsupported: bool = False) -> tuple[int, int]:
    """(N, K): a listed shape, or N and K drawn from TAIL_RANGES, or (GPU topologies) a model size; a shape the
    implementation does not support (``supports``) is moved to the nearest one it does, or — with
    ``unsupported`` — kept one time in UNSUPPORTED_ODDS: such a call must be rejected with a typed error or
    fall back per can_run (fuzz/families/support.py checks that). Shrinks toward the listed shapes, then
    small N and K."""
    m = machine(topology)
    supports = supports or all_shapes
    source = draw(st.sampled_from(SHAPE_SOURCES[m]))
    if source == "listed":
        N, K = draw(st.sampled_from(SHAPES[m]))
    elif source == "tails":
        (n_lo, n_hi), (k_lo, k_hi) = TAIL_RANGES[m]
        N, K = draw(st.integers(n_lo, n_hi)), draw(st.integers(k_lo, k_hi))
    else:
        N = draw(st.sampled_from(MODEL_HIDDEN))
        K = N // draw(st.integers(*MODEL_TP))
    if supports(N, K) or (unsupported and draw(st.integers(0, UNSUPPORTED_ODDS - 1)) == UNSUPPORTED_ODDS - 1):
        return N, K
    snapped = nearest_supported(supports, N, K)
    if snapped is None:
        listed = [s for s in SHAPES[m] if supports(*s)]
        if not listed:
            raise ValueError(f"the implementation supports none of the listed shapes {SHAPES[m]} nor any near "
                             f"({N}, {K}): nothing to gate")
        return listed[0]
    return snapped


#: The compute cases' autograd modes (``Case.autograd``): the caller's own (grad enabled), or the eager calls under
#: ``torch.inference_mode()``, ``torch.no_grad()`` and grad enabled in turn (``fuzz.families.calls.AUTOGRAD_MODES``);
#: None first, so a failure shrinks to the caller's own mode where the modes do not matter.
AUTOGRAD_DRAWS = (None, "rotate")
#: The compute and dispatch cases' caller defaults (``Case.defaults``): the process's own, or an engine's -- bf16 as
#: the default dtype, the implementation's device as the default device (``fuzz.families.calls.caller_defaults``) --
#: around the case's constructions (its own instance: built under them) and eager calls; None first.
DEFAULTS_DRAWS = (None, "engine")


@st.composite
def compute_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                  supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology, supports, unsupported=True))
    ms = draw(st.lists(m_values(world_size, max_M), min_size=1, max_size=4))
    if len(ms) > 1 and draw(st.booleans()):
        ms.append(ms[0])  # come back to the first M after others: a result kept per shape is stale now
    kind = draw(st.sampled_from(KINDS))
    kinds = None
    if len(ms) > 1:
        # every call a different kind, the first one's being ``kind``; shrinks toward KINDS order
        others = draw(st.permutations([k for k in KINDS if k != kind]))
        kinds = [kind] + [others[i % len(others)] for i in range(len(ms) - 1)]
    out = draw(st.sampled_from(["guarded", "none"]))
    late_rank = draw(st.none() | st.integers(0, world_size - 1))
    # 100 ms: above any natural jitter of a loaded host, so a skew-dependent bug shows for sure
    delay_ms = draw(st.sampled_from(DRAWN_DELAYS_MS)) if late_rank is not None else 0
    seed = draw(st.integers(0, 2**31 - 1))
    layout = draw(layouts(world_size))
    if late_rank is not None:
        late_rank = _in_every_group(late_rank, layout)
    # drawn last: the draws above (and so the examples a derandomized run makes of them) stay as they were
    batch_m = draw(m_values(world_size, max_M))
    offset = draw(st.sampled_from(VIEW_OFFSETS))
    autograd = draw(st.sampled_from(AUTOGRAD_DRAWS))
    defaults = draw(st.sampled_from(DEFAULTS_DRAWS))
    burst = draw(st.booleans())
    return Case("compute", seed, N, K, max_M, ms, kind, out, repeat=2, late_rank=late_rank, delay_ms=delay_ms,
                kinds=kinds, layout=layout, batch_m=batch_m, offset=offset, autograd=autograd, defaults=defaults,
                burst=burst)


#: capacities of the instances family's own instances (several sizes: different workspaces, different
#: crossovers; small ones keep the CPU cost low)
INSTANCE_MAX_MS = (257, 1024, 4096)


@st.composite
def instances_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                    supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """Several live instances (the pool's one of the case's shape, and 1-2 of the case's own at other
    (N, K, max_M)), calls interleaved over them, then 0-2 re-created at other sizes."""
    max_M = max_M or MAX_M[machine(topology)]
    catalogue = [nk for nk in SHAPES[machine(topology)] if (supports or all_shapes)(*nk)] or SHAPES[machine(topology)]
    N, K = draw(shapes(topology, supports))
    others = [list(nk) for nk in catalogue if tuple(nk) != (N, K)]
    picked = draw(st.lists(st.sampled_from(others), min_size=1, max_size=2, unique_by=tuple))
    own = [[n, k, draw(st.sampled_from(INSTANCE_MAX_MS))] for n, k in picked]
    n_calls = draw(st.integers(len(own) + 1, len(own) + 3))
    # every instance called at least once, in an interleaved order (the pool's instance first)
    order = draw(st.permutations([i % (len(own) + 1) for i in range(n_calls)]))
    # each call's M within its instance's capacity, that capacity itself (the boundary where one instance's
    # state leaking into another shows: a larger layer's valid M past a smaller layer's max_M) among the draws
    caps = [max_M] + [c for _, _, c in own]
    ms = [draw(st.one_of(st.just(caps[i]), m_values(world_size, caps[i]))) for i in order]
    recreate = draw(st.lists(st.sampled_from(catalogue).map(list), max_size=2))
    recreate = [[n, k, draw(st.sampled_from(INSTANCE_MAX_MS))] for n, k in recreate]
    kind = draw(st.sampled_from(KINDS))
    out = draw(st.sampled_from(["guarded", "none"]))
    case = Case("instances", draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=1,
                shapes=own, order=list(order), recreate=recreate or None, layout=draw(layouts(world_size)))
    # drawn last (the draws above keep their examples): the rank late before each call of the back-to-back step
    case.late_rank, case.delay_ms = _late_rank(draw, world_size, case.layout), draw(st.sampled_from(GRAPH_DELAYS_MS))
    return case


def _late_rank(draw, world_size: int, layout) -> int:
    """A group rank every group of ``layout`` has (any rank of the world without one)."""
    return _in_every_group(draw(st.integers(0, world_size - 1)), layout)


def _in_every_group(rank: int, layout) -> int:
    """``rank`` as a group rank every group of ``layout`` has (unchanged without a layout)."""
    return rank if layout is None else min(rank, min(len(g) for g in layout) - 1)


#: M values a layer meets around the contract's default should_run threshold (128); the family adds both
#: sides of the implementation's own crossover on the rank side
DISPATCH_MS = (1, 64, 127, 128, 129, 255, 256, 1024)


def _near_case(draw, family: str, favoured, *, max_size: int, outs: tuple[str, ...], world_size: int,
               topology: str, max_M: int | None, supports=None) -> Case:
    """A ``family`` case of 1..max_size M values near ``favoured``, exact or gaussian inputs, on a drawn
    layout."""
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology, supports))
    ms = draw(ms_near(favoured, world_size, max_M, max_size=max_size))
    kind = draw(st.sampled_from(["exact", "gaussian"]))
    out = draw(st.sampled_from(outs))
    return Case(family, draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=1,
                layout=draw(layouts(world_size)))


@st.composite
def dispatch_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                   supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """A layer dispatching on should_run / can_run, M alternating across the threshold; its eager calls (and the
    case's instance) under the caller's defaults or an engine's (``Case.defaults``, drawn last): the side an
    implementation falls back on is built there too."""
    case = _near_case(draw, "dispatch", DISPATCH_MS, max_size=3, outs=("none",), world_size=world_size,
                      topology=topology, max_M=max_M, supports=supports)
    case.defaults = draw(st.sampled_from(DEFAULTS_DRAWS))
    return case


@st.composite
def layer_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """Layers as an engine holds them: several live instances interleaved and re-created, or a layer's
    should_run / can_run dispatch."""
    family = draw(st.sampled_from(("instances", "dispatch")))
    return draw(FAMILY_STRATEGIES[family](world_size, topology, max_M, supports=supports))


@st.composite
def capacity_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                   supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology, supports))
    bad = draw(st.sampled_from(CAPACITY_BADS))
    m_after = draw(m_values(world_size, min(max_M, 1024)))
    # "over" materialises max_M + 1 rows of x: keep max_M modest for it
    cap = draw(st.sampled_from([max_M, 257, 1024])) if bad == "over" else max_M
    return Case("capacity", draw(st.integers(0, 2**31 - 1)), N, K, cap, [min(m_after, cap)], bad=bad)


@st.composite
def bad_call_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                   supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology, supports))
    bad = draw(st.sampled_from(["all", *sorted(BAD_CALLS)]))
    m = draw(m_values(world_size, min(max_M, 1024)))
    return Case("bad_call", draw(st.integers(0, 2**31 - 1)), N, K, max_M, [m], bad=bad)


@st.composite
def graph_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """Deep graphs: 1-2 drawn M (the family adds both sides of the tile switch and of should_run's
    crossover), at least 3 rounds of replays, then each graph replayed in a row with one rank late (drawn last:
    the draws above keep their examples)."""
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology, supports))
    ms = draw(st.lists(m_values(world_size, max_M), min_size=1, max_size=2, unique=True))
    kind = draw(st.sampled_from(["gaussian", "exact"]))
    out = draw(st.sampled_from(["guarded", "none"]))
    case = Case("graph", draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=3,
                layout=draw(layouts(world_size)))
    case.late_rank, case.delay_ms = _late_rank(draw, world_size, case.layout), draw(st.sampled_from(GRAPH_DELAYS_MS))
    return case


#: M of stream cases: large enough that the call's kernels outlast the caller's next steps
STREAM_MS = (1024, 2048, 4097, 8191)


@st.composite
def streams_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                  supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """Calls on a non-default stream beside a busy one, inputs overwritten and freed right after."""
    return _near_case(draw, "streams", STREAM_MS, max_size=2, outs=("guarded", "none"), world_size=world_size,
                      topology=topology, max_M=max_M, supports=supports)


#: byte_boundary cases: hidden sizes whose rows make 2^31 / 2^32 bytes at a few hundred thousand rows; K small
#: (the boundary is in M * N; K only costs time).
BYTE_BOUNDARY_N = (8192, 7168)
BYTE_BOUNDARY_K = 64
#: How far past the limit the buffer reaches (rows past the boundary row exist and are checked).
BYTE_BOUNDARY_PAST = 1 << 20


@st.composite
def byte_boundary_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None,
                        supports: Callable[[int, int], Eligibility] | None = None) -> Case:
    """max_M = M with the all-rank workspace (about M rows of N bf16) crossing 2^32 bytes by 1 MiB (and so
    2^31); at W = 1 the output too. ``max_M`` is ignored: the size is the point."""
    supports = supports or all_shapes
    N, K = draw(st.sampled_from(BYTE_BOUNDARY_N)), BYTE_BOUNDARY_K
    N, K = (N, K) if supports(N, K) else (nearest_supported(supports, N, K) or (N, K))
    limit = draw(st.sampled_from((2**31, 2**32)))
    M = -(-(limit + BYTE_BOUNDARY_PAST) // (2 * N))
    M += (-M) % world_size
    kind = draw(st.sampled_from(["exact", "gaussian"]))
    return Case("byte_boundary", draw(st.integers(0, 2**31 - 1)), N, K, M, [M], kind, out="none", repeat=1)


def wrap_strategy(world_size: int, topology: str = "cpu", max_M: int | None = None,
                  supports: Callable[[int, int], Eligibility] | None = None) -> st.SearchStrategy[Case]:
    """One of the fixed counter-wrap cases (:func:`wrap_cases`; ``max_M`` is theirs)."""
    return st.sampled_from(wrap_cases(world_size, topology, supports))


FAMILY_STRATEGIES = {
    "compute": compute_cases,
    "capacity": capacity_cases,
    "bad_call": bad_call_cases,
    "graph": graph_cases,
    "instances": instances_cases,
    "dispatch": dispatch_cases,
    "streams": streams_cases,
    "byte_boundary": byte_boundary_cases,
    "wrap": wrap_strategy,
}
