"""Where a case's time goes (fuzz/phases.py): named phases, the inner one charged when nested, ``checks`` the
rest; a family's wait for the device after its calls is charged to ``calls``."""

from __future__ import annotations

import time

import pytest
import torch

from fuzz import phases


def test_nested_phases_charge_the_inner_one_and_checks_is_the_rest():
    phases.begin()
    with phases.phase("oracle"):
        time.sleep(0.05)
        with phases.phase("truth"):
            time.sleep(0.1)
    got = phases.end(total_seconds=0.5)
    assert 0.04 <= got["oracle"] < 0.09 and 0.09 <= got["truth"] < 0.15
    assert got["checks"] == pytest.approx(0.5 - got["oracle"] - got["truth"], abs=1e-3)
    assert set(got) == set(phases.PHASES)


def test_outside_a_case_a_phase_is_free_and_names_are_checked():
    with phases.phase("calls"):  # no case begun: nothing recorded, nothing raised
        pass
    with pytest.raises(ValueError, match="unknown phase"):
        with phases.phase("checks"):
            pass


def test_a_familys_wait_for_the_device_is_charged_to_calls(monkeypatch):
    from fuzz.families.context import RankContext

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: time.sleep(0.1))
    ctx = RankContext(lambda *a, **k: None, rank=0, world_size=1, device=torch.device("cuda", 0),
                      topology="shared-gpu")
    phases.begin()
    ctx.sync()
    got = phases.end(total_seconds=0.12)
    assert got["calls"] >= 0.09 and got["checks"] < 0.03


def test_the_slowest_rank_names_the_case_and_the_driver_keeps_the_rest():
    ranks = {0: {"phases": {"calls": 0.1, "checks": 0.1}}, 1: {"phases": {"calls": 0.5, "checks": 0.2}}, 2: {}}
    assert phases.slowest_rank(ranks) == {"calls": 0.5, "checks": 0.2}
    assert phases.harness_seconds(1.0, phases.slowest_rank(ranks)) == pytest.approx(0.3)
    assert phases.slowest_rank({}) == {}


def test_rank_zero_profiles_its_first_case_alone_and_the_rest_together(tmp_path, monkeypatch):
    import pstats

    from fuzz import config, rank_worker

    monkeypatch.setattr(config, "_CURRENT", config.resolve(environ={"GEMM_RS_PROFILE_RANKS": str(tmp_path)}))
    assert rank_worker.CaseProfiler.for_rank(1, 2, "cpu").path is None  # other ranks: off
    prof = rank_worker.CaseProfiler.for_rank(0, 2, "cpu")

    def first_case_work():
        return sum(range(1000))

    def later_case_work():
        return sorted(range(1000))

    with prof:
        first_case_work()
    for _ in range(3):
        with prof:
            later_case_work()
    prof.close()
    first, rest = (str(p) for p in sorted(tmp_path.glob("cpu-W2-*-*.prof")))
    assert first.endswith("-first.prof") and rest.endswith("-rest.prof")
    names = {fn[2]: ncalls for fn, (ncalls, *_rest) in pstats.Stats(first).stats.items()}
    assert names.get("first_case_work") == 1 and "later_case_work" not in names
    names = {fn[2]: ncalls for fn, (ncalls, *_rest) in pstats.Stats(rest).stats.items()}
    assert names.get("later_case_work") == 3 and "first_case_work" not in names


def test_rank_zero_does_not_profile_unless_asked(monkeypatch):
    from fuzz import config, rank_worker

    monkeypatch.setattr(config, "_CURRENT", config.resolve(environ={}))
    prof = rank_worker.CaseProfiler.for_rank(0, 2, "cpu")
    with prof:
        pass
    prof.close()
    assert prof.path is None and prof.profile is None


def test_a_rank_preloads_modules_in_the_background_and_ignores_one_that_fails(tmp_path, monkeypatch):
    import sys

    from fuzz import rank_worker

    (tmp_path / "gemm_rs_preload_probe.py").write_text("LOADED_BY = __import__('threading').current_thread().name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gemm_rs_preload_probe", raising=False)
    thread = rank_worker._preload(("gemm_rs_no_such_module", "gemm_rs_preload_probe"))
    thread.join(timeout=30)
    assert not thread.is_alive() and sys.modules["gemm_rs_preload_probe"].LOADED_BY == "gemm-rs-preload"
    assert rank_worker._preload(()) is None


def test_a_gpu_rank_gives_cached_memory_back_after_a_case_only_past_the_threshold():
    """Ranks of pools beside each other on one GPU must not each keep the blocks of their largest case (two
    W = 16 pools ran an H200 out of memory): past ``CACHE_KEEP_BYTES`` reserved, the cache is emptied; below
    it, and on the CPU, nothing is done (no synchronising free per case)."""
    import types

    from fuzz.rank_worker import CACHE_KEEP_BYTES, trim_gpu_cache

    emptied = []

    def fake_torch(reserved):
        cuda = types.SimpleNamespace(memory_reserved=lambda device: reserved, empty_cache=lambda: emptied.append(1))
        return types.SimpleNamespace(cuda=cuda)

    gpu, cpu = types.SimpleNamespace(type="cuda"), types.SimpleNamespace(type="cpu")
    assert trim_gpu_cache(fake_torch(CACHE_KEEP_BYTES + 1), gpu) and emptied == [1]
    assert not trim_gpu_cache(fake_torch(CACHE_KEEP_BYTES), gpu) and emptied == [1]
    assert not trim_gpu_cache(fake_torch(10 * CACHE_KEEP_BYTES), cpu) and emptied == [1]


def test_a_rank_whose_cuda_context_broke_between_cases_stays_to_be_asked():
    """The trim after a case raising (the case's kernel trapped: the context is gone) must not end the rank --
    torchrun would kill its silent peers before the driver took their stacks: the rank keeps serving, every later
    case gets the error."""
    import types

    from fuzz.rank_worker import CACHE_KEEP_BYTES, between_cases

    def empty_cache():
        raise RuntimeError("CUDA error: unspecified launch failure")

    gpu = types.SimpleNamespace(type="cuda")
    broken = types.SimpleNamespace(cuda=types.SimpleNamespace(memory_reserved=lambda device: 2 * CACHE_KEEP_BYTES,
                                                              empty_cache=empty_cache))
    fine = types.SimpleNamespace(cuda=types.SimpleNamespace(memory_reserved=lambda device: 0, empty_cache=None))
    said = between_cases(broken, gpu, lambda exc: f"{type(exc).__name__}: {exc}")
    assert said.startswith("this rank's CUDA context broke after an earlier case") and "unspecified launch" in said
    assert between_cases(fine, gpu, str) is None
    # once broken, every later case gets the first error, whether or not a later trim raises
    assert between_cases(fine, gpu, str, broken=said) == said and between_cases(broken, gpu, str, broken=said) == said
