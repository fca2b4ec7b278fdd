"""Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (default ``ci``):

* ``ci``      — derandomized (the same examples every run, so CI is reproducible), no deadline (a case
  is a multi-process collective; the pool has its own per-case deadline), ``print_blob`` so a failure
  prints its ``@reproduce_failure`` blob, no example database (derandomized runs don't need one);
* ``dev``     — random, fewer examples, the local example database (failures replay first next run);
* ``nightly`` — random, many examples, the database.

``GEMM_RS_EXAMPLES`` overrides max_examples of any profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

# filter_too_much: examples an implementation waives (fuzz/gate.py) are rejected and redrawn
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, database=None,
                          max_examples=25, suppress_health_check=_SLOW_OK)
settings.register_profile("dev", deadline=None, print_blob=True, max_examples=15, suppress_health_check=_SLOW_OK)
settings.register_profile("nightly", deadline=None, print_blob=True, max_examples=400,
                          suppress_health_check=_SLOW_OK,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def load() -> None:
    settings.load_profile(PROFILE)


#: examples per gate test, relative to a profile's max_examples of 25 (fuzz/test_gemm_rs.py uses these;
#: the campaign uses them to estimate the time left)
WEIGHTS = {
    "test_compute": 40,
    "test_capacity": 12,
    "test_bad_call": 15,
    "test_graph_replay": 8,
    "test_capacity_under_python_O": 6,
}


def examples(test_name: str) -> int:
    """Examples for a gate test in this process: GEMM_RS_EXAMPLES, else the profile's by the test's weight."""
    return examples_for(test_name, PROFILE, os.environ.get("GEMM_RS_EXAMPLES"))


def examples_for(test_name: str, profile: str, override: str | None = None) -> int:
    """Examples a gate test runs under ``profile`` (and an optional GEMM_RS_EXAMPLES value)."""
    if override:
        return int(override)
    return max(1, settings.get_profile(profile).max_examples * WEIGHTS[test_name] // 25)
