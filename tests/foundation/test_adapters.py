"""The async-TP adapter's declared differences from the contract: known clause names with reasons, a
probe without the unaligned-M waiver, both reachable by name (running them needs a GPU: ci/gpu-check)."""

from __future__ import annotations

from kernel.adapters.torch_async_tp import TorchAsyncTpGemmRs, TorchAsyncTpUnalignedProbe
from kernel.interface import CLAUSES
from kernel.registry import load_implementation


def test_async_tp_waivers_are_known_clauses_with_reasons():
    assert set(TorchAsyncTpGemmRs.waived_clauses) <= set(CLAUSES)
    assert set(TorchAsyncTpGemmRs.waived_clauses) == {"out_param", "capacity_check", "typed_errors", "unaligned_m"}
    assert all(len(reason) > 20 for reason in TorchAsyncTpGemmRs.waived_clauses.values())
    assert "graph_capture" not in TorchAsyncTpGemmRs.waived_clauses  # graphs are checked, not waived


def test_the_probe_checks_unaligned_m_and_waives_the_rest():
    assert "unaligned_m" not in TorchAsyncTpUnalignedProbe.waived_clauses
    assert set(TorchAsyncTpUnalignedProbe.waived_clauses) == set(TorchAsyncTpGemmRs.waived_clauses) - {"unaligned_m"}


def test_adapters_load_by_name():
    assert load_implementation("torch-async-tp") is TorchAsyncTpGemmRs
    probe = "kernel.adapters.torch_async_tp:TorchAsyncTpUnalignedProbe"
    assert load_implementation(probe) is TorchAsyncTpUnalignedProbe


def test_a_misspelt_waiver_is_refused_at_class_definition():
    import pytest

    from kernel.unfused import UnfusedGemmRs

    with pytest.raises(TypeError, match="unaligned_M"):
        type("Typo", (UnfusedGemmRs,), {"waived_clauses": {"unaligned_M": "typo"}})


def test_every_waivable_clause_is_honoured_by_the_gate():
    """No waiver the gate accepts but never consults: each clause of CLAUSES is looked up by a family
    (which then reports that clause's checks as skipped with the reason)."""
    from pathlib import Path

    families = Path(__file__).resolve().parents[2] / "fuzz" / "families"
    source = "\n".join(p.read_text() for p in sorted(families.glob("*.py")))
    for clause in CLAUSES:
        assert f'waiver(impl, "{clause}")' in source, f"clause {clause!r} is waivable but no family honours it"


def test_async_tp_declares_its_path_and_needs_a_cuda_device():
    from types import SimpleNamespace

    import torch

    assert TorchAsyncTpGemmRs.main_path == TorchAsyncTpUnalignedProbe.main_path == "torch-async-tp"
    assert TorchAsyncTpGemmRs.fallback_path is None
    support = TorchAsyncTpGemmRs.main_path_support(SimpleNamespace(device=torch.device("cpu")))
    assert not support and "not a usable CUDA device" in support.reason


def test_a_spec_naming_nothing_loadable_is_an_unsupported_config_error():
    """``--impl`` takes a registry name or ``module:attribute``: an unknown name and a module without the attribute
    are each an ``UnsupportedConfigError`` naming what is missing (the gate's typed error for an implementation it
    cannot build), not the ``AttributeError`` of the lookup."""
    import pytest

    from kernel.errors import UnsupportedConfigError

    with pytest.raises(UnsupportedConfigError, match="unknown implementation 'no-such-impl'"):
        load_implementation("no-such-impl")
    with pytest.raises(UnsupportedConfigError, match="kernel.unfused has no attribute 'UnfusedGemmRz'"):
        load_implementation("kernel.unfused:UnfusedGemmRz")
