"""The GEMM-RS benchmark's report: ratios side by side, and on a shared GPU a statement instead of a
cross-rank ratio (the timing is meaningless there). The GPU part runs on the device; this checks the
rendering on CPU with made-up numbers."""

from __future__ import annotations

from tests.bench_scripts import load_bench


def _bench():
    return load_bench("bench_gemm_rs")


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
     "mm_s": 80e-6, "bound_s": 90e-6, "core_tflops": 700.0, "mm_tflops": 700.0, "auto_s": 95e-6,
     "auto_protocol": "push"},
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
    assert "2.00x" in line and "1.68x" in line and "1.06x" in line  # auto vs mm + RS, async-TP, the bound
    assert line.rstrip().endswith("| push")  # the protocol auto ran at that M
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


def test_experiments_table_shows_where_the_push_time_goes():
    rows = [{"M": 8192, "check": "ok", "push_s": 400e-6, "push_first_s": 470e-6, "ring4_s": 430e-6,
             "local_push_s": 330e-6, "no_mma_s": 180e-6, "mm_s": 315e-6, "tx_s": 155e-6, "push_tiles": "128x256"},
            {"M": 128, "check": "FAIL"}]
    text = _bench().render_experiments(rows)
    line = next(x for x in text.splitlines() if x.strip().startswith("8192"))
    for value in ("400.0", "470.0", "430.0", "330.0", "180.0", "315.0", "155.0", "70.0", "128x256"):
        assert value in line, value  # 70.0: what NVLink costs the push kernel (push - local_push)
    assert "push_first" in text and "local_push" in text and "no_mma" in text
    failed = next(x for x in text.splitlines() if x.strip().startswith("128"))
    assert "n/a" in failed


def test_all_tiles_table_marks_the_chosen_config():
    mod = load_bench("bench_gemm")
    from kernel.fused.tiles import kernel_configs

    text = mod.render_all_tiles(kernel_configs("push", 132), [(256, 7168, 2048, 1, [480.0, 520.5, 361.0], 534.0)])
    line = text.splitlines()[-1]
    assert "520.5*" in line and "480.0 " in line and "534.0" in line
    assert "128x224" in text and "64x128" in text
    # pull: a column per K-part count of each split-K config (the data the split constants are fitted to)
    pull = kernel_configs("pull", 132)
    labels = [label for label, _, _ in mod.tile_columns(pull)]
    assert labels == ["128x256", "128x224", "128x256/2", "128x256/3", "128x256/4", "128x224/2", "128x224/3",
                      "128x224/4", "64x112", "64x112c2", "64x128c2", "64x128"]
    assert [p for _, _, p in mod.tile_columns(pull)][2:5] == [2, 3, 4]
    text = mod.render_all_tiles(pull, [(128, 8192, 14336, 4, [float(i) for i in range(12)], 485.6)])
    assert "4.0*" in text.splitlines()[-1] and "128x256/4" in text


def test_protocol_entry_names_the_faster_protocol_per_m():
    rows = [{"M": 128, "check": "ok", "fused_s": 2.0, "push_s": 1.0, "unfused_s": 3.0},
            {"M": 256, "check": "ok", "fused_s": 1.0, "push_s": 1.5, "unfused_s": 3.0},
            {"M": 512, "check": "FAIL"}]
    e = _bench().protocol_entry(rows, 7168, 2048, 2, "test", "cmd")
    assert e["by_m"] == {128: "push", 256: "pull"} and (e["N"], e["K"], e["W"]) == (7168, 2048, 2)
    assert _bench().protocol_entry([{"M": 128, "check": "FAIL"}], 1, 64, 2, "t", "c") is None
