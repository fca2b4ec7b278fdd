"""The GEMM-RS benchmark's report: ratios side by side, and on a shared GPU a statement instead of a
cross-rank ratio (the timing is meaningless there). The GPU part runs on the device; this checks the
rendering on CPU with made-up numbers."""

from __future__ import annotations

import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gemm_rs", os.path.join(REPO, "bench", "bench_gemm_rs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROWS = [
    {"M": 512, "check": "ok", "fused_s": 100e-6, "unfused_s": 150e-6, "core_tflops": 600.0, "mm_tflops": 650.0},
    {"M": 8192, "check": "ok", "fused_s": 1e-3, "unfused_s": 1.4e-3, "core_tflops": 720.0, "mm_tflops": 690.0},
]


def test_multi_gpu_table_prints_both_ratios():
    text = _bench().render_table(ROWS, shared=False)
    assert "1.50x" in text and "1.40x" in text       # fused vs torch mm + RS
    assert "0.92x" in text and "1.04x" in text       # GEMM core vs torch.mm
    assert "NOTE" not in text


def test_shared_gpu_table_says_so_instead_of_a_ratio():
    text = _bench().render_table(ROWS, shared=True)
    assert "1.50x" not in text and "n/a" in text
    assert "meaningless" in text
    assert "0.92x" in text  # the GEMM core is timed on rank 0 alone: still meaningful


def test_plot_is_written(tmp_path):
    path = tmp_path / "ratios.png"
    why = _bench().plot(ROWS, False, str(path), "test")
    assert why is None and path.stat().st_size > 1000


ROWS_FULL = [
    {"M": 2048, "check": "ok", "fused_s": 150e-6, "push_s": 100e-6, "unfused_s": 190e-6, "asynctp_s": 160e-6,
     "mm_s": 80e-6, "bound_s": 90e-6, "core_tflops": 700.0, "mm_tflops": 700.0},
    {"M": 4096, "check": "FAIL"},
]


def test_push_async_tp_and_bound_columns():
    text = _bench().render_table(ROWS_FULL, shared=False)
    line = next(x for x in text.splitlines() if x.strip().startswith("2048"))
    assert "1.27x" in line  # pull vs mm + RS (190 / 150)
    assert "1.90x" in line  # push vs mm + RS
    assert "1.60x" in line  # push vs async-TP
    assert "1.11x" in line  # push over the physical bound (100 / 90)
    assert "1.00x" in line  # GEMM core vs torch.mm
    failed = next(x for x in text.splitlines() if x.strip().startswith("4096"))
    assert "FAIL" in failed and "x" not in failed.split("|", 2)[2]  # a failed check prints no ratio


def test_crossover_entries_from_rows():
    rows = [
        {"M": 128, "check": "ok", "fused_s": 2.0, "push_s": 2.0, "unfused_s": 1.0},
        {"M": 256, "check": "ok", "fused_s": 1.5, "push_s": 0.9, "unfused_s": 1.0},
        {"M": 512, "check": "ok", "fused_s": 0.9, "push_s": 0.5, "unfused_s": 1.0},
        {"M": 1024, "check": "FAIL"},
    ]
    entries = {e["protocol"]: e for e in _bench().crossovers(rows, 7168, 2048, 2, "test", "cmd")}
    assert entries["pull"]["min_m"] == 512 and entries["push"]["min_m"] == 256
    assert all((e["N"], e["K"], e["W"]) == (7168, 2048, 2) for e in entries.values())
