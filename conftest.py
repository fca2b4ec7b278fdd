"""Repository-wide pytest set-up: Hypothesis profile, the gate's command-line options, seeds from ids."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuzz import settings as fuzz_settings  # noqa: E402

fuzz_settings.load()


def pytest_addoption(parser):
    g = parser.getgroup("gemm-rs", "GEMM-RS gate")
    g.addoption("--impl", default=os.environ.get("GEMM_RS_IMPL"),
                help="comma list of implementations to gate (names or module:attr); default: everything "
                     "the host can run (unfused; fused too on a Hopper GPU)")
    g.addoption("--world-sizes", default=os.environ.get("GEMM_RS_WORLD_SIZES"),
                help="comma list of W; default 1,2,3,4,8 (cpu) / 1,2,4,8 (gpu)")
    g.addoption("--topology", default=os.environ.get("GEMM_RS_TOPOLOGIES"),
                help="comma list of cpu, shared-gpu, multi-gpu; default: all the host supports")


def pytest_report_header(config):
    return (f"gemm-rs: hypothesis profile {fuzz_settings.PROFILE}, python optimize={sys.flags.optimize}, "
            f"PYTHONOPTIMIZE={os.environ.get('PYTHONOPTIMIZE', '')!r}")


@pytest.fixture
def test_seed(request) -> int:
    """A seed derived from the test id (cutlass/JAX style): a failure names the exact seed to rerun."""
    return int.from_bytes(hashlib.blake2b(request.node.nodeid.encode(), digest_size=4).digest(), "little")
