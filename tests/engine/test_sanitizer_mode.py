"""Sanitizer mode wiring, on CPU: the REPRO line and the pool key carry the sanitizer, summaries are
parsed (0 errors / N errors / missing summary), and the cases cover the GPU properties."""

from __future__ import annotations

from fuzz.case import Case, PoolSpec, repro_command
from fuzz.sanitize import cases, summaries


def test_repro_line_carries_the_sanitizer():
    line = repro_command(Case("compute", seed=1, N=64, K=64, max_M=64), PoolSpec(sanitizer="racecheck"))
    assert line.endswith("--sanitizer racecheck")
    assert "--sanitizer" not in repro_command(Case("compute", seed=1, N=64, K=64, max_M=64), PoolSpec())


def test_sanitizer_is_part_of_the_pool_key():
    assert PoolSpec(sanitizer="memcheck").key() != PoolSpec().key()


def test_summaries_are_parsed(tmp_path):
    (tmp_path / "sanitizer-11.log").write_text("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    (tmp_path / "sanitizer-12.log").write_text("========= Invalid __global__ write\n"
                                               "========= ERROR SUMMARY: 3 errors\n")
    (tmp_path / "sanitizer-13.log").write_text("========= COMPUTE-SANITIZER\n")
    race = "========= RACECHECK SUMMARY: {} hazards displayed (0 errors, {} warnings)\n"
    (tmp_path / "sanitizer-14.log").write_text(race.format(0, 0))
    (tmp_path / "sanitizer-15.log").write_text(race.format(2, 2))
    assert summaries(str(tmp_path)) == {"sanitizer-11.log": 0, "sanitizer-12.log": 3, "sanitizer-13.log": None,
                                        "sanitizer-14.log": 0, "sanitizer-15.log": 2}


def test_sanitizer_cases_cover_the_gpu_properties():
    families = {c.family for c in cases()}
    assert families == {"compute", "capacity", "graph"}
    assert any(c.late_rank is not None for c in cases())
    assert any(M % 2 for c in cases() for M in c.ms)  # unaligned M


def test_sanitizer_paths_add_the_declared_split_k_paths():
    """``--paths split``: the gate's cases of every split-K path the fused kernel declares (a graph of each too);
    ``all`` adds the unsplit tile configs; an implementation without the query adds nothing."""
    small = cases()
    split = cases("fused", 2, "split")
    added = split[len(small):]
    assert split[:len(small)] == small and added
    assert {c.family for c in added} == {"compute", "graph"}
    assert len(cases("fused", 2, "all")) > len(split)
    assert len(cases("unfused", 2, "split")) == len(small)
