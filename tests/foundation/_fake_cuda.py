"""A CPU model of CUDA streams and graphs, enough to run the graph and streams families (fuzz/families/graph.py,
streams.py) on CPU ranks and see their checks fail on implementations planted for it. Off a GPU those families skip
("no CUDA graphs", "no CUDA streams"), so without this model a check of theirs wired to the wrong thing (a replay
never made on another stream, the padding compared with itself, the caller's copy taken after the sync, the oracle
compared with itself) went through CPU CI (36th session's planted-bug audit of fuzz/families/: G1, G4, G5, T1, T2).

The model, installed by :func:`installed` (every name restored after):

* ``torch.cuda.Stream`` objects, ``current_stream``, the ``stream`` context: a stack of streams, nothing reordered;
  ``wait_stream`` does nothing (the model runs every op at once, in program order);
* work an implementation queues for later (:meth:`Runtime.later`: a result written by a stream the caller's does
  not wait for) runs at ``torch.cuda.synchronize``;
* ``torch.cuda.CUDAGraph`` and the ``graph`` capture context: an implementation's call inside a capture runs and
  is recorded by :class:`Replayable` (the captured kernels on the captured buffers); ``replay`` calls it again on
  the same x, w and result buffer, and notes the stream it replayed on and whether it followed a replay of the
  same graph with no call between (``back_to_back``);
* ``torch.cuda.is_current_stream_capturing`` says whether a capture is open; ``torch.cuda._sleep`` does
  nothing; ``Tensor.pin_memory`` is the tensor; the streams family's busy matmuls are 8 x 8;
  :attr:`fuzz.families.RankContext.on_cuda` says yes.

Not a test module: no ``assert`` (the workers raise)."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

from fuzz.families import RankContext
from fuzz.families import streams as streams_family
from kernel.checks import check_operands
from kernel.registry import load_implementation
from kernel.unfused import UnfusedGemmRs

_ids = itertools.count()
RUNTIME: Runtime | None = None


class FakeCudaError(RuntimeError):
    """The model used outside :func:`installed`."""


def runtime() -> Runtime:
    if RUNTIME is None:
        raise FakeCudaError("the fake CUDA runtime is not installed (tests/foundation/_fake_cuda.installed)")
    return RUNTIME


class Stream:
    def __init__(self, device=None, priority: int = 0):
        self.id = next(_ids)

    def wait_stream(self, other) -> None:  # every op already ran, in program order
        pass

    def __repr__(self) -> str:
        return f"<fake stream {self.id}>"


class Graph:
    """A captured graph: the calls recorded in its capture, replayed in order."""

    def __init__(self, *args, **kwargs):
        self.calls: list = []
        self.captured_on: Stream | None = None
        self.replays: list[tuple[Stream, bool]] = []  # (stream, back to back) of each replay

    def replay(self) -> None:
        rt = runtime()
        back_to_back = rt.last_replayed is self
        rt.last_replayed = self
        self.replays.append((rt.current_stream(), back_to_back))
        for call in self.calls:
            call(self)


class Runtime:
    def __init__(self):
        self.default = Stream()
        self.stack = [self.default]
        self.pending: list = []
        self.capturing: Graph | None = None
        self.last_replayed: Graph | None = None  # None after any call made outside a replay
        self.graphs: list[Graph] = []

    def current_stream(self, device=None) -> Stream:
        return self.stack[-1]

    @contextlib.contextmanager
    def stream(self, s):
        self.stack.append(s if s is not None else self.stack[-1])
        try:
            yield
        finally:
            self.stack.pop()

    @contextlib.contextmanager
    def graph(self, g: Graph, *args, **kwargs):
        g.captured_on, self.capturing = self.current_stream(), g
        self.graphs.append(g)
        try:
            yield
        finally:
            self.capturing = None

    def later(self, work) -> None:
        """``work`` runs at the next ``torch.cuda.synchronize``: written by a stream the caller did not wait for."""
        self.pending.append(work)

    def synchronize(self, device=None) -> None:
        pending, self.pending = self.pending, []
        for work in pending:
            work()


@contextlib.contextmanager
def installed():
    """The model in place of torch.cuda's streams, graphs and syncs (module docstring) for the ``with`` block."""
    global RUNTIME
    rt = Runtime()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (("Stream", Stream), ("CUDAGraph", Graph), ("current_stream", rt.current_stream),
                            ("stream", rt.stream), ("graph", rt.graph), ("synchronize", rt.synchronize),
                            ("_sleep", lambda cycles: None),
                            ("is_current_stream_capturing", lambda: rt.capturing is not None)):
            mp.setattr(torch.cuda, name, value)
        mp.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)
        mp.setattr(RankContext, "on_cuda", property(lambda self: True))
        mp.setattr(streams_family, "BUSY_DIM", 8)
        RUNTIME = rt
        try:
            yield rt
        finally:
            RUNTIME = None


class Replayable(UnfusedGemmRs):
    """The unfused implementation, its calls inside a capture recorded: each replay calls it again on the captured
    x, w and result buffer, as a CUDA graph's replay runs the captured kernels on the captured addresses. The
    planted implementations below change :meth:`replayed` or :meth:`__call__`; this one is their control."""

    name = "fake-cuda-replayable"
    should_run_min_m = 1  # a dispatch layer takes this side at every M (its captured forward: the op's replay)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the model's replay calls it again: capturable here (the unfused path over gloo waives capture on a host)
        self.waived_clauses = {c: why for c, why in self.waived_clauses.items() if c != "graph_capture"}

    def __call__(self, x, w, out=None):
        rt = runtime()
        y = super().__call__(x, w, out=out)
        if rt.capturing is not None:
            rt.capturing.calls.append(lambda g, x=x, w=w, y=y: self.replayed(g, x, w, y))
        else:
            rt.last_replayed = None
        return y

    def replayed(self, g: Graph, x, w, y) -> None:
        UnfusedGemmRs.__call__(self, x, w, out=y)


class WrongOnAnotherStream(Replayable):
    """A replay on another stream than the capture's reads its inputs before they are there (the kernel's side work
    baked to the capture's stream): the valid rows off by 1000."""

    name = "fake-cuda-wrong-on-another-stream"

    def replayed(self, g, x, w, y):
        super().replayed(g, x, w, y)
        if runtime().current_stream() is not g.captured_on:
            y[: self.valid_rows(x.shape[0])].add_(1000.0)


class PaddingWrittenOnReplay(Replayable):
    """Every replay writes the result's padding rows (rows past the rank's valid ones): the capture itself did not."""

    name = "fake-cuda-padding-written-on-replay"

    def replayed(self, g, x, w, y):
        super().replayed(g, x, w, y)
        y[self.valid_rows(x.shape[0]):].fill_(7.0)


class StaleOnBackToBackReplays(Replayable):
    """A replay right after a replay of the same graph (nothing between but new inputs written in place, as in a
    decode loop) finds its own last replay's flags raised and writes nothing: the result is what was there."""

    name = "fake-cuda-stale-on-back-to-back-replays"

    def replayed(self, g, x, w, y):
        if not g.replays[-1][1]:
            super().replayed(g, x, w, y)


class StaleReplay(Replayable):
    """A replay writes nothing: the result is the capture's (a graph whose kernels read a host value baked at
    capture, or skip the work on a stale flag)."""

    name = "fake-cuda-stale-replay"

    def replayed(self, g, x, w, y):
        pass


class CapacityUncheckedWhileCapturing(Replayable):
    """The capacity check skipped inside a capture ("the warm-up checked it"): an M past max_M captured runs past the
    workspace (here: whatever the unfused path raises on a buffer too small, not CapacityError)."""

    name = "fake-cuda-capacity-unchecked-while-capturing"

    def validate(self, x, w, out):
        if torch.cuda.is_current_stream_capturing():
            return check_operands(x, w, out, N=self.N, K=self.K, max_M=1 << 30, world_size=self.world_size,
                                  device=self.device)
        return super().validate(x, w, out)


class ResultLandsAtSync(UnfusedGemmRs):
    """The caller's stream does not wait for the result: it is right only after a device sync (before it, the valid
    rows hold -3)."""

    name = "fake-cuda-result-lands-at-sync"

    def __call__(self, x, w, out=None):
        y = super().__call__(x, w, out=out)
        n = self.valid_rows(x.shape[0])
        right = y[:n].clone()
        y[:n].fill_(-3.0)
        runtime().later(lambda: y[:n].copy_(right))
        return y


class OneUlpOffOnExactInputs(UnfusedGemmRs):
    """One unit in the last place off in every valid element: within any tolerance, never bitwise equal."""

    name = "fake-cuda-one-ulp-off"

    def __call__(self, x, w, out=None):
        y = super().__call__(x, w, out=out)
        y[: self.valid_rows(x.shape[0])].view(torch.int16).add_(1)
        return y


def graph_case_on_ranks(rank: int, world_size: int, *, impl: str, case_json: str):
    """One graph-family case on this gloo rank under the model: info holds this rank's failed and passed check
    names and how its graphs were replayed (run by tests/foundation/_dist.run_ranks)."""
    from fuzz.case import Case
    from fuzz.families import run_case

    with installed() as rt:
        factory = globals()[impl] if impl in globals() else load_implementation(impl)  # or "module:Class"
        ctx = RankContext(factory, rank=rank, world_size=world_size, device=torch.device("cpu"))
        try:
            checks = run_case(ctx, Case.from_json(case_json))
        finally:
            ctx.close()
        return [], {"failed": sorted({c.name for c in checks if not c.passed and not c.skipped}),
                    "passed": sorted({c.name for c in checks if c.passed}),
                    "failed_at_rows": sorted({c.worst_row for c in checks if not c.passed and not c.skipped
                                              and c.worst_row is not None}),
                    "replays": sum(len(g.replays) for g in rt.graphs)}
