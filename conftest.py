"""Repository-wide pytest set-up: Hypothesis profile, the gate's command-line options, seeds from ids."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuzz import config as fuzz_config  # noqa: E402
from fuzz import settings as fuzz_settings  # noqa: E402

fuzz_settings.load()


def pytest_addoption(parser):
    g = parser.getgroup("gemm-rs", "GEMM-RS gate (fuzz/config.py: flag, else its GEMM_RS_ variable)")
    fuzz_config.add_flags(g.addoption, fuzz_config.COMMON["pytest fuzz/"])


def pytest_configure(config):
    """The gate's flags become this process's settings (fuzz/config.py), over the environment."""
    fuzz_config.install({name: config.getoption(name) for name in fuzz_config.COMMON["pytest fuzz/"]})
    try:
        from tests import skip_guard
    except ImportError:  # a copy of fuzz/ without the suite's tests
        return
    skip_guard.pytest_configure(config)  # a test of tests/ skips only for a reason tests/ gives


def pytest_report_header(config):
    return (f"gemm-rs: hypothesis profile {fuzz_settings.PROFILE}, python optimize={sys.flags.optimize}, "
            f"PYTHONOPTIMIZE={os.environ.get('PYTHONOPTIMIZE', '')!r}")


@pytest.fixture
def test_seed(request) -> int:
    """A seed derived from the test id (cutlass/JAX style): a failure names the exact seed to rerun."""
    return int.from_bytes(hashlib.blake2b(request.node.nodeid.encode(), digest_size=4).digest(), "little")


#: The suite's longest single tests (minutes each on 2 cores): started first, so the other workers run
#: everything else beside them instead of waiting for them at the end.
LONG_POLES = ("tests/mutation/test_kill_matrix.py::test_kill_matrix_ci",)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_POLES))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the suite's path groups (tests/scheduling.py): pytest 9 drops xdist's marks."""
    try:
        from tests.scheduling import make_scheduler
    except ImportError:  # a copy of fuzz/ without the suite's tests: xdist's own scheduling
        return None
    return make_scheduler(config, log)
