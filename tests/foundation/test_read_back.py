"""Checks read their numbers back at once (properties.result.read_back): on a GPU that W ranks time-slice,
every read-back waits for the device, and a check that read each count, each index and each value alone
waited ten times per call. The values are those of one read per number."""

from __future__ import annotations

import torch

import properties.bias as bias
import properties.guards as guards
import properties.result as result
from oracle.truth import seeded_shard_truth
from properties import within_tolerance


def test_read_back_keeps_order_and_mixes_numbers_and_tensors():
    got = result.read_back([torch.tensor(3), 2.5, torch.tensor([7.25]).sum(), 4, torch.tensor(True)])
    assert got == [3.0, 2.5, 7.25, 4.0, 1.0]
    assert result.read_back([]) == []


def _counting(monkeypatch, module=result) -> list[int]:
    """``module.read_back`` replaced by one that records how many numbers each read-back carried."""
    calls = []
    real = module.read_back

    def counted(values):
        values = list(values)
        calls.append(len(values))
        return real(values)

    monkeypatch.setattr(module, "read_back", counted)
    return calls


def test_a_failing_tolerance_check_reads_back_twice(monkeypatch):
    truth = seeded_shard_truth(3, "gaussian", 0, 40, 32, 64, 2)
    y = truth.y.to(torch.bfloat16)
    y[2, 5] += 1.0
    calls = _counting(monkeypatch)
    res = within_tolerance(y, truth, rank=0)
    assert not res.passed and res.worst_index == (2, 5)
    assert len(calls) == 2, calls  # counts and the worst place, then the worst element's values


def test_the_bias_check_reads_back_once(monkeypatch):
    model = bias.seeded_rounding_model(3, "gaussian", 0, 300, 64, 128, 2)
    calls = _counting(monkeypatch, bias)
    res = bias.no_systematic_bias(model.y.to(torch.bfloat16), model, rank=0)
    assert res.passed and len(calls) == 1, calls


def test_guard_regions_read_back_once_for_every_region(monkeypatch):
    calls = _counting(monkeypatch, guards)
    a, b = torch.arange(8, dtype=torch.int16), torch.arange(6, dtype=torch.int16)
    hit = b.clone()
    hit[4] = -1
    res = guards.guard_regions_untouched({"front": (a, a.clone()), "back": (hit, b)}, rank=0)
    assert not res.passed and res.n_wrong == 1 and "region 'back'" in res.detail
    assert len(calls) == 1
