"""The benchmarks' host-side measurement logic on CPU: correctness is checked first and a failed check is neither
timed nor a pass (exit status), ratios are ours-faster-is-above-1 and of the right series, a collective's time is
its slowest rank's, medians and the physical bound are what their names say. Fakes stand in for the GPU timing and
for torch.distributed; the tensors are small CPU ones."""

from __future__ import annotations

import statistics
import types

import pytest
import torch

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def gemm():
    return load_bench("bench_gemm")


@pytest.fixture(scope="module")
def rs():
    return load_bench("bench_gemm_rs")


def _mm(x, w, out=None):
    y = torch.mm(x.float(), w.float().t()).bfloat16()
    return y if out is None else out.copy_(y)


# --- bench_gemm.py ------------------------------------------------------------------------------------------------

def test_check_passes_a_right_gemm_and_fails_a_wrong_one(gemm):
    verdict, diff = gemm.check(_mm, 16, 32, 64, "cpu")
    assert verdict == "ok" and diff == 0.0
    verdict, _ = gemm.check(lambda x, w: (_mm(x, w).float() * 1.02).bfloat16(), 16, 32, 64, "cpu")
    assert verdict.startswith("FAIL("), verdict


def test_a_failed_check_is_not_timed(gemm, monkeypatch):
    timed = []
    monkeypatch.setattr(gemm, "bench_one", lambda *a: timed.append(a) or (1.0, 1.0, (1.0, 1.0, 1.0)))
    monkeypatch.setattr(gemm, "check", lambda *a: ("FAIL(3 out of bound)", 0.5))
    assert gemm.measure(_mm, 16, 32, 64, "cpu") == ("FAIL(3 out of bound)", 0.5, None) and not timed
    monkeypatch.setattr(gemm, "check", lambda *a: ("ok", 0.0))
    assert gemm.measure(_mm, 16, 32, 64, "cpu")[2] == (1.0, 1.0, (1.0, 1.0, 1.0)) and len(timed) == 1


def test_bench_one_times_ours_and_torch_mm_each_under_its_own_name(gemm, monkeypatch):
    """Ours twice as fast as torch.mm: ours' TF/s twice mm's, and the replay-by-replay ratios (the speed of ours
    over torch.mm, as the ratio column) 2."""
    seen = {}

    def fake_samples(torch_, named_calls, samples, before_each=None):
        for name, calls in named_calls.items():
            out = calls[0]()
            seen[name] = (out.shape, calls[0].__defaults__[0] is not None)
        return {"ours": [1e-3, 1.1e-3, 0.9e-3], "mm": [2e-3, 2.2e-3, 1.8e-3]}

    def fake_samples_buffers(torch_, named_calls, samples, before_each=None):
        seen["buffers"] = {name: len({id(c.__defaults__[0]) for c in calls}) for name, calls in named_calls.items()}
        return fake_samples(torch_, named_calls, samples, before_each)

    calls = []
    monkeypatch.setattr(gemm, "interleaved_samples", fake_samples_buffers)
    tf_o, tf_m, (q1, q2, q3) = gemm.bench_one(lambda x, w, out: calls.append(1) or _mm(x, w, out), 16, 32, 64, "cpu")
    flops = 2.0 * 16 * 32 * 64
    assert tf_o == pytest.approx(flops / 1e-3 / 1e12) and tf_m == pytest.approx(flops / 2e-3 / 1e12)
    assert (q1, q2, q3) == pytest.approx((2.0, 2.0, 2.0))
    assert set(seen) == {"ours", "mm", "buffers"} and len(calls) == 1  # ours' closures call ours, mm's do not
    # a small shape: every call of a graph on its own inputs (the working set past L2), the same ones for both
    assert seen["buffers"] == {"ours": gemm.REPS, "mm": gemm.REPS}


def test_the_row_shows_ours_over_mm_and_no_timing_for_a_failed_check(gemm):
    line = gemm.row_line(256, 7168, 2048, "ok", 0.0, (600.0, 300.0, (1.9, 2.0, 2.1)), "128x256")
    assert "600.0" in line and "300.0" in line and " 2.00 " in line and "1.90-2.10" in line, line
    line = gemm.row_line(256, 7168, 2048, "FAIL(3 out of bound)", 0.5, None, "128x256")
    assert "FAIL(3 out of bound)" in line and "n/a" in line and "." not in line.split("|")[2], line


# --- bench_gemm_rs.py ---------------------------------------------------------------------------------------------

class FakeDist:
    """all_reduce over this rank and ``others`` (the other ranks' tensors), with the op asked for."""

    ReduceOp = types.SimpleNamespace(MAX="max", MIN="min", SUM="sum")

    def __init__(self, *others):
        self.others = others

    def all_reduce(self, t, op=None, group=None):
        stack = torch.stack([t, *[torch.tensor(o, dtype=t.dtype) for o in self.others]])
        t.copy_({"max": stack.max(0).values, "min": stack.min(0).values, "sum": stack.sum(0)}[op])


def test_a_sample_s_time_is_its_slowest_rank_s_then_the_median_over_samples(rs):
    mine, other = [1.0, 5.0, 1.0, 1.0, 1.0], [2.0, 1.0, 2.0, 2.0, 9.0]
    # per sample the slowest rank: 2 5 2 2 9 -> median 2 (each rank's own median: 1 and 2; the fastest: 1)
    assert rs.max_over_ranks(torch, FakeDist(other), None, mine) == 2.0
    assert rs.max_over_ranks(torch, FakeDist([0.0] * 4), None, [4.0, 1.0, 3.0, 2.0]) == 2.5  # an even count
    samples = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    assert rs.max_over_ranks(torch, FakeDist(), None, samples) == statistics.median(samples)


def test_the_physical_bound_is_the_slower_of_the_gemm_and_the_transfer(rs):
    tx = 1 / 2 * 1024 * 4096 * 2 / 100e9  # W = 2: half the M x N bf16 result leaves each rank
    assert rs.bound_seconds(1e-6, 1024, 4096, 2, 100.0) == pytest.approx((tx, tx))
    assert rs.bound_seconds(1e-3, 1024, 4096, 2, 100.0) == pytest.approx((tx, 1e-3))
    assert rs.bound_seconds(1e-6, 1024, 4096, 8, 100.0)[0] == pytest.approx(7 / 8 * 1024 * 4096 * 2 / 100e9)


def test_a_failed_check_makes_the_exit_status_1_and_its_timings_feed_no_table(rs):
    ok = {"M": 128, "check": "ok", "fused_s": 2.0, "push_s": 1.0, "unfused_s": 3.0}
    failed = {"M": 256, "check": "FAIL", "fused_s": 0.1, "push_s": 0.2, "unfused_s": 3.0}
    assert rs.exit_status([ok]) == 0 and rs.exit_status([ok, failed]) == 1
    assert rs.protocol_entry([ok, failed], 7168, 2048, 2, "t", "c")["by_m"] == {128: "push"}
    assert all(e["min_m"] == 128 for e in rs.crossovers([ok, failed], 7168, 2048, 2, "t", "c"))


def test_the_plot_draws_speedups_ours_faster_above_1(rs, monkeypatch, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    rows = [{"M": 512, "check": "ok", "fused_s": 100e-6, "push_s": 80e-6, "unfused_s": 150e-6, "asynctp_s": 120e-6,
             "bound_s": 40e-6, "core_tflops": 600.0, "mm_tflops": 500.0}]
    assert rs.plot(rows, False, str(tmp_path / "p.png"), "t") is None
    lines = {ln.get_label(): float(ln.get_ydata()[0]) for ln in figs[0].axes[0].get_lines()
             if ln.get_label()[0] != "_"}
    assert lines == pytest.approx({"fused pull / (torch mm + RS)": 1.5, "fused push / (torch mm + RS)": 1.875,
                                   "fused push / async-TP": 1.5, "physical bound / fused push": 0.5,
                                   "GEMM core / torch.mm": 1.2})


def test_a_failed_check_s_row_shows_no_timing_whatever_it_carries(rs):
    row = {"M": 2048, "check": "FAIL", "fused_s": 150e-6, "push_s": 100e-6, "unfused_s": 190e-6, "mm_s": 80e-6,
           "core_tflops": 700.0, "mm_tflops": 600.0}
    line = rs.render_table([row], shared=False).splitlines()[-1]
    assert "FAIL" in line and not any(ch.isdigit() for ch in line.split("|", 2)[2]), line


class _Event:
    def __init__(self, clock, enable_timing=False):
        self.clock = clock

    def record(self):
        self.t = self.clock.now

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return other.t - self.t


def test_the_nvlink_bandwidth_is_timed_by_the_slowest_rank(rs, monkeypatch):
    """Every rank copies 256 MiB to the next at once; the bandwidth is the bytes over the slowest rank's median
    time (2 ms here, this rank's 1 ms), the first two copies a warm-up."""
    import torch.distributed._symmetric_memory as symm_mem

    import kernel.fused.workspace as workspace

    clock = types.SimpleNamespace(now=0.0, copies=0)

    def copy(src):  # 50 ms for the two warm-up copies, then 1 ms each
        clock.copies += 1
        clock.now += 50.0 if clock.copies <= 2 else 1.0

    peer = types.SimpleNamespace(copy_=copy)
    handle = types.SimpleNamespace(rank=0, world_size=2, get_buffer=lambda *a: peer, barrier=lambda: None)
    monkeypatch.setattr(symm_mem, "empty", lambda *a, **k: None)
    monkeypatch.setattr(symm_mem, "rendezvous", lambda *a, **k: handle)
    monkeypatch.setattr(workspace, "use_cuda_backend", lambda dev: None)
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=lambda **k: _Event(clock)), tensor=torch.tensor,
                                       randint=lambda *a, **k: None, uint8=torch.uint8, float64=torch.float64)
    dist = FakeDist([2e-3])
    dist.barrier = lambda group=None: None
    dist.group = types.SimpleNamespace(WORLD=None)
    gbs = rs.measure_nvlink_gbs(fake_torch, dist, None, "cuda:0", None)
    assert gbs == pytest.approx(256 * 2**20 / 2e-3 / 1e9)


def test_bench_gemm_exits_1_when_a_shape_fails_its_check(gemm, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "fake GPU")
    monkeypatch.setattr(gemm, "FusedGemmRs", lambda **k: types.SimpleNamespace(**k))
    monkeypatch.setattr(gemm, "tile_name", lambda impl, M: "128x256")
    monkeypatch.setattr(gemm, "host_overhead_us", lambda impl, M: 1.0)
    monkeypatch.setattr(gemm, "compile_stats", lambda: {"configs": {}})
    monkeypatch.setattr("sys.argv", ["bench_gemm.py", "--ms", "128,256", "--ns", "256", "--ks", "128"])
    verdicts = {128: ("ok", 0.0, (500.0, 400.0, (1.2, 1.25, 1.3))), 256: ("FAIL(2 out of bound)", 1.0, None)}
    monkeypatch.setattr(gemm, "measure", lambda impl, M, N, K, dev: verdicts[M])
    assert gemm.main() == 1
    out = capsys.readouterr().out
    assert " 1.25 1.20-1.30 " in out and "FAIL(2 out of bound)" in out, out
    verdicts[256] = verdicts[128]
    assert gemm.main() == 0


def test_bench_gemm_rs_main_returns_the_checks_exit_status():
    """main runs under torchrun on GPUs only; its status is :func:`exit_status` of every row it measured (a failed
    check fails ci/gpu-check's bench steps), never a constant."""
    import ast
    import inspect

    main = next(n for n in ast.parse(inspect.getsource(load_bench("bench_gemm_rs"))).body
                if isinstance(n, ast.FunctionDef) and n.name == "main")
    returns = [n.value for n in ast.walk(main) if isinstance(n, ast.Return) and n.value is not None
               and not any(n in ast.walk(f) for f in main.body if isinstance(f, ast.FunctionDef))]
    assert returns and all(isinstance(v, ast.Call) and getattr(v.func, "id", "") == "exit_status" for v in returns), \
        [ast.unparse(v) for v in returns]
