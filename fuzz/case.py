"""A fuzz case: plain data (JSON) that, with the pool's world size, topology and implementation,
determines everything a rank does. The driver's Hypothesis strategies (:mod:`fuzz.strategies`) build
cases; ranks rebuild inputs from the seed; :func:`repro_command` is the one command that reruns one.

Families (runners: fuzz.families.FAMILIES) and what each checks (the verification model; names are property
names in reports).

Every valid call, in every family (fuzz/families/calls.py):
          path_taken        (the path the call reported in last_path is the one the contract has serve it:
                             the main path where can_run says yes, else the declared fallback, with the reason)
          result_contract   (bf16, (ceil(M/W), N), on the implementation's device, contiguous)
          returns_out       (out= given: the returned tensor is out)
          fresh_result      (out=None: no storage shared with state_tensors() or any earlier result)
          fresh_padding_zero (out=None: padding rows are +0.0, as the oracle's)
          call_raised       (fails when a valid call raises: type, message, traceback)
and per case: earlier_results_unchanged (every result the case holds keeps its bits to the end),
inputs_untouched (no eager call changed its x or w, no call's ops -- a capture's too -- wrote into them),
ambient_state_kept (no eager call, nor a construction, left the caller's device, stream, grad mode, math flags or
random generators changed: properties/ambient.py),
main_path_available (fails every case where the host cannot build the implementation's main path), and at the
end, once the rank's GPU work is done, guard_regions_untouched of every instance it holds (``extra.when`` "case
end": a late write past a workspace shows in the case that made it).

compute   for each M of ``ms`` in order, on one long-lived implementation instance (call i uses input
          kind ``kinds[i]``, or ``kind`` for every call when ``kinds`` is None; ``autograd`` "rotate": the eager
          calls under torch.inference_mode(), torch.no_grad() and grad enabled in turn; ``defaults`` "engine": the
          case's instances built and its eager calls made with bf16 as the default dtype and the implementation's
          device as the default device, as an engine builds its layers -- the case's own long-lived instance):
          1 within_tolerance  (implementation vs fp64 truth, derived budget)
          2 oracle_within_tolerance (the oracle vs the same truth: the reference itself is sane)
          3 bitwise_equal     (kind "exact": implementation == oracle bit for bit)
          4 nonfinite_pattern_matches (NaN/Inf positions and classes == oracle's)
          5 padded_rows_untouched (out= pre-filled with a sentinel)
          6 guard_regions_untouched (red zones around out, after workspaces and flags)
          7 repeatable        (``repeat`` calls at ms[0] give identical bits)
          8 fresh_per_call    (len(ms) > 1: each result == a fresh instance's first call at that M)
          9 inputs_changed_in_place (after the calls at ms[0]: new values written into the same x and w
                              tensors past their version counters, one more call: within tolerance of
                              the new truth, bitwise in exact mode — a result or staging keyed by data
                              pointer, or by pointer and ``_version``, shows here)
         10 no_systematic_bias (each call's shard: the mean signed error and the mean error along the sign
                              of the truth are consistent with round-to-nearest; skipped with the reason
                              where nothing is rounded or too few elements are, docs/NUMERICS.md)
         11 batch_invariant   (``batch_m``: the tokens of the call at ms[0] placed at other rows of a call
                              at batch_m, among other tokens, each in its owner's shard: the same bits;
                              waivable on non-exact inputs, clause ``batch_invariant``)
          also oracle_exact (exact mode: the oracle == the fp64 truth rounded to bf16).
          ``late_rank`` sleeps ``delay_ms`` before its calls (skew changes nothing but time).
          ``burst``: the calls of ms once more (two calls at ms[0] where ms has one M) on new inputs, launched
          back to back with no wait and no oracle between them (the late rank's delay before each, on its stream),
          then 1-6 of each after one wait (call tags ``burst<i>``): a rank enters its next call while a peer
          still reads the last one's data -- the calls above each have the oracle's collective (which lines the
          ranks up) or a wait before the next, which hides a write-after-read race (a missing done wait).
          ``offset`` > 0: x and w are views at that storage offset (16-byte aligned) into a larger buffer whose
          head holds other values — valid operands, computed right (a kernel given the storage's base pointer
          instead of data_ptr() reads the head).
capacity  an out-of-range M (``bad``: "zero", "over", "huge") is rejected with CapacityError before any
          work and changes nothing (capacity_rejected), on a GPU also inside a CUDA-graph capture
          (capacity_rejected_in_capture), then a valid call still passes 1-6.
bad_call  an invalid call from the bad-call table (fuzz/bad_calls.py; ``bad``: one of its names, or "all"
          for every one in turn on the same instance) raises its typed error and changes nothing
          (bad_call_rejected).
byte_boundary (nightly, GPU) max_M = ms[0] with rows * N * 2 bytes crossing 2^31 and 2^32 (``byte_limits``):
          rejected with a typed error (byte_boundary_rejected) or computed right on the rows at every boundary
          (within_tolerance, bitwise_equal; fuzz/families/byte_boundary.py).
graph     (CUDA) deep graphs: one graph per M (ms, plus both sides of the tile switch and of should_run's
          crossover), replayed in interleaved rounds (>= 3) with inputs changed in place and out poisoned
          before every replay, an eager call between rounds, one round on another stream, then each graph
          replayed in a row (``late_rank`` sleeping ``delay_ms`` before each replay, no host wait between):
          every replay within tolerance of a fresh oracle (graph_replay, graph_replay_exact,
          graph_replay_padding); the next eager call too.
instances several live instances (the pool's one of the case's shape, ``shapes``: the case's own), calls
          interleaved (``order``), the same calls again back to back (``late_rank`` sleeping ``delay_ms``
          before each, no wait and no oracle between them), then ``recreate``: instances closed and built
          again at other sizes; every call 1-6, other_instances_untouched (across each verified call, every
          other instance's state and red zones), should_run_stable (each instance's should_run answers at birth
          and at the end).
dispatch  a layer: ``if op.should_run(x) and op.can_run(w): op(x, w) else reduce_scatter(x @ w.T)``, M
          from ``ms`` and both sides of should_run's crossover: dispatch_agrees_across_ranks,
          should_run_stable, the implementation's call within tolerance and dispatch_sides_agree with the
          torch path; (CUDA) the layer captured per M and replayed (dispatch_graph_replay).
wrap      (implementations with a call counter, ``call_counter_bits``) a fresh instance advanced by the contract's
          ``advance_call_counter`` to just before the counter's ``wrap`` ("signed": 2^31, "unsigned": 2^32 calls),
          then the calls of ``ms`` across it, each 1-6 (the late rank sleeping before each):
          counter_advanced (the advance took), counter_wrapped (the calls crossed the boundary)
          (fuzz/families/wrap.py). Without a counter: skipped with the reason.
streams   (CUDA) a call on a non-default stream while another is busy, inputs landing late on it and
          overwritten, freed and reallocated on it right after the call returns: stream_ordered_result,
          stream_ordered_exact, stream_ordered_padding, guard_regions_untouched.

Any family may run on a TP layout (``layout``: groups of world ranks, fuzz/layouts.py; fuzz/families/
groups.py): each group runs the family at once on its own instances and its DP replica's inputs, every
check with the group rank and size (``extra``: group, replica); a rank outside every group checks
outside_rank_untouched; then every rank makes one verified call on the world (``world_after_layout``).
"""

from __future__ import annotations

import base64
import json
import shlex
import zlib
from dataclasses import asdict, dataclass, field

from .layouts import describe as describe_layout

CAPACITY_BADS = ("zero", "over", "huge")  # the bad calls: fuzz.bad_calls.CAPACITY_CALLS


def __getattr__(name: str):
    # BAD_CALLS (the bad-call table, fuzz/bad_calls.py) imports torch; this module stays plain data
    if name == "BAD_CALLS":
        from .bad_calls import BAD_CALLS

        return BAD_CALLS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Case:
    family: str
    seed: int
    N: int
    K: int
    max_M: int
    ms: list[int] = field(default_factory=lambda: [1])
    kind: str = "gaussian"
    out: str = "guarded"          # "guarded": sentinel-filled out= with red zones; "none": out=None
    repeat: int = 2
    late_rank: int | None = None
    delay_ms: int = 0
    bad: str | None = None
    kinds: list[str] | None = None  # input kind of each call of ms (compute); None: ``kind`` for all
    batch_m: int | None = None      # compute: M of the batch-invariance call (None: no such call)
    offset: int = 0                 # x and w: views starting this many elements (a multiple of 8) into a buffer
    byte_limits: list[int] | None = None  # byte_boundary: the offsets checked (None: 2^31 and 2^32)
    layout: list[list[int]] | None = None  # TP groups (world ranks; fuzz/layouts.py); None: the world
    shapes: list[list[int]] | None = None  # instances: [N, K, max_M] of each live instance, built in order
    order: list[int] | None = None     # instances: the instance each call of ms goes to
    recreate: list[list[int]] | None = None  # instances: [N, K, max_M] each re-created instance gets
    wrap: str | None = None            # wrap: the counter boundary crossed, "signed" (2^31) or "unsigned" (2^32)
    autograd: str | None = None        # "rotate": eager calls under inference_mode, no_grad, grad, ... in turn
    defaults: str | None = None        # "engine": constructions and eager calls under bf16 / the device as defaults
    burst: bool = False                # compute: the calls of ms again, on new inputs, back to back (one wait)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict) -> Case:
        d = json.loads(text) if isinstance(text, str) else dict(text)
        return cls(**d)

    def call_kinds(self) -> list[str]:
        """The input kind of each call of ``ms``."""
        if self.kinds is None:
            return [self.kind] * len(self.ms)
        if len(self.kinds) != len(self.ms):
            raise ValueError(f"kinds {self.kinds} and ms {self.ms} differ in length")
        return list(self.kinds)

    def short(self) -> str:
        kind = self.kind if self.kinds is None else "/".join(self.kinds)
        parts = [self.family, f"M={self.ms}", f"N={self.N}", f"K={self.K}", kind]
        if self.bad:
            parts.append(f"bad={self.bad}")
        if self.late_rank is not None:
            parts.append(f"late_rank={self.late_rank}+{self.delay_ms}ms")
        if self.layout is not None:
            parts.append(f"layout={describe_layout(self.layout)}")
        if self.shapes:
            parts.append("instances=" + "/".join("x".join(map(str, s)) for s in self.shapes))
        if self.recreate:
            parts.append("recreate=" + "/".join("x".join(map(str, s)) for s in self.recreate))
        if self.wrap:
            parts.append(f"wrap={self.wrap}")
        if self.autograd:
            parts.append(f"autograd={self.autograd}")
        if self.defaults:
            parts.append(f"defaults={self.defaults}")
        if self.burst:
            parts.append("burst")
        return " ".join(parts)


@dataclass(frozen=True)
class PoolSpec:
    """What a rank pool runs: it is part of every repro line."""

    impl: str = "unfused"
    topology: str = "cpu"
    world_size: int = 2
    optimize: int = 0
    sanitizer: str | None = None  # compute-sanitizer tool the ranks run under (memcheck, racecheck, ...)
    nnodes: int = 1               # hosts (torchrun agents) the W ranks are spread over, W / nnodes each

    def key(self) -> tuple:
        return (self.impl, self.topology, self.world_size, self.optimize, self.sanitizer, self.nnodes)


def repro_command(case: Case, spec: PoolSpec, history: list[Case] | None = None) -> str:
    """One command that reruns exactly this case on a fresh pool of the same kind; ``history``: the cases the
    failing pool ran before it, replayed first (``--history``, :func:`encode_history`)."""
    py = "python -O" if spec.optimize else "python"
    return (
        f"{py} -m fuzz.repro --impl {shlex.quote(spec.impl)} --topology {spec.topology} "
        f"--world-sizes {spec.world_size} --case {shlex.quote(case.to_json())}"
        + (f" --history {encode_history(history)}" if history else "")
        + (f" --sanitizer {spec.sanitizer}" if spec.sanitizer else "")
        + (f" --nnodes {spec.nnodes}" if spec.nnodes > 1 else "")
    )


def encode_history(cases: list[Case]) -> str:
    """Cases as one shell-safe word: ``z:`` + urlsafe base64 of the zlib-compressed JSON list."""
    raw = json.dumps([json.loads(c.to_json()) for c in cases], separators=(",", ":")).encode()
    return "z:" + base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()


def decode_history(text: str) -> list[Case]:
    """The inverse of :func:`encode_history`; a plain JSON list of cases is accepted too."""
    if text.startswith("z:"):
        text = zlib.decompress(base64.urlsafe_b64decode(text[2:].encode())).decode()
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("--history must be a list of cases")
    return [Case.from_json(json.dumps(c)) for c in items]
