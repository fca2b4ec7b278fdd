"""Hypothesis profiles, chosen by HYPOTHESIS_PROFILE, else by the gate's ``--profile`` (``GEMM_RS_PROFILE``:
smoke and ci -> ``ci``, nightly -> ``nightly``; default ``ci``):

* ``ci``      — Hypothesis's own CI model: derandomized (the same examples every run, so CI is
  reproducible), hence no example database (Hypothesis forbids one with ``derandomize``), no deadline (a
  case is a multi-process collective; the pool has its own per-case deadline), ``print_blob`` so a
  failure prints its ``@reproduce_failure`` blob;
* ``dev``     — random, fewer examples, the example database;
* ``nightly`` — random, many examples, the example database;
* ``replay``  — only the examples stored in the database (phases explicit + reuse): what a CI run does
  first, so a failure a nightly run found is the first thing the next CI run tries (``ci/fuzz`` and
  ``ci/gate`` run it before the ``ci`` pass whenever the database holds examples:
  :func:`stored_examples`).

The database is Hypothesis's ``DirectoryBasedExampleDatabase`` (entries keyed by test id, so each
implementation/topology/W has its own; failing examples are kept, examples that pass again are
dropped). Keep its directory between runs as a CI cache or artifact (ci/pipelines/ shows how):
``--hypothesis-db`` (``GEMM_RS_HYPOTHESIS_DB``) names it (default ``<repo>/.hypothesis/examples``, Hypothesis's usual
place); ``none`` turns it off (the mutation meta-test does, so planted bugs leave no entries behind).

``--examples`` (``GEMM_RS_EXAMPLES``) overrides max_examples of any profile; the ``smoke`` gate profile is
the ``ci`` profile at 4 examples per test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from .config import current

# filter_too_much: examples an implementation waives (fuzz/gate.py) are rejected and redrawn
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def example_database(value: str | None = None):
    """The example database every profile uses: ``--hypothesis-db`` (a directory, or ``none``)."""
    value = (current().hypothesis_db or "") if value is None else value
    if value.strip().lower() == "none":
        return None
    return DirectoryBasedExampleDatabase(value or os.path.join(REPO, ".hypothesis", "examples"))


_DB = example_database()

# Every profile is built on Hypothesis's own ``default`` profile, never on whatever profile is loaded when
# this module is imported: where the ``CI`` environment variable is set (GitHub Actions, GitLab, ...),
# Hypothesis loads its built-in ``ci`` profile (derandomized, no database) as the default, and a profile
# registered without a parent would inherit that, so a nightly run on a CI runner would draw the same
# examples every night. ``derandomize`` is spelled out on each profile for the same reason.
_BASE = settings.get_profile("default")

settings.register_profile("ci", parent=_BASE, derandomize=True, deadline=None, print_blob=True, database=None,
                          max_examples=25, suppress_health_check=_SLOW_OK)
settings.register_profile("dev", parent=_BASE, derandomize=False, deadline=None, print_blob=True,
                          max_examples=15, database=_DB, suppress_health_check=_SLOW_OK)
settings.register_profile("nightly", parent=_BASE, derandomize=False, deadline=None, print_blob=True,
                          max_examples=400, database=_DB, suppress_health_check=_SLOW_OK,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])

settings.register_profile("replay", parent=_BASE, derandomize=False, deadline=None, print_blob=True,
                          max_examples=25, database=_DB, suppress_health_check=_SLOW_OK,
                          phases=[Phase.explicit, Phase.reuse])

#: gate profile (--profile) -> (Hypothesis profile, examples per test or None: the profile's)
GATE_PROFILES = {
    "smoke": ("ci", "4"),
    "ci": ("ci", None),
    "nightly": ("nightly", None),
}


def _gate_profile() -> tuple[str, str | None]:
    name = current().profile or "ci"
    if name not in GATE_PROFILES:
        raise ValueError(f"--profile must be one of {sorted(GATE_PROFILES)}, not {name!r}")
    return GATE_PROFILES[name]


PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or _gate_profile()[0]


def stored_examples(value: str | None = None) -> int:
    """How many examples the example database holds (0 when it is off or empty): a replay pass is worth
    running only when this is non-zero."""
    db = example_database(value)
    if db is None or not os.path.isdir(db.path):
        return 0
    return sum(len(files) for _, _, files in os.walk(db.path))


def load() -> None:
    settings.load_profile(PROFILE)


#: examples per gate test, relative to a profile's max_examples of 25 (fuzz/test_gemm_rs.py uses these;
#: the campaign uses them to estimate the time left)
WEIGHTS = {
    "test_compute": 40,
    "test_layers": 6,
    "test_capacity": 12,
    "test_bad_call": 15,
    "test_graph_replay": 8,
    "test_streams": 8,
    "test_capacity_under_python_O": 6,
    "test_byte_boundaries": 2,
}


#: cases of the gate tests that are not Hypothesis-driven (a fixed list of cases; the deal's estimate): the
#: fused kernel's 8 declared paths, a compute case each and a graph case for its 5 split-K ones
#: (fuzz/strategies.py: path_cases); the two counter-wrap cases (wrap_cases); the shard-boundary case
#: (shard_boundary_cases); the three smallest-shape cases (smallest_shape_cases); the two model-size cases
#: (model_shape_cases); the far-late case (late_rank_cases); the whole-world dispatch case (dispatch_crossover_cases);
#: the back-to-back case (back_to_back_cases)
FIXED_CASES = {"test_kernel_paths": 13, "test_counter_wrap": 2, "test_shard_boundaries": 1, "test_smallest_shapes": 3,
               "test_model_shapes": 2, "test_late_rank": 1, "test_dispatch_crossover": 1, "test_back_to_back": 1}


def examples(test_name: str) -> int:
    """Examples for a gate test in this process: --examples, else the gate profile's (smoke), else the
    Hypothesis profile's by the test's weight."""
    return examples_for(test_name, PROFILE, current().examples or _gate_profile()[1])


def examples_for(test_name: str, profile: str, override: str | None = None) -> int:
    """Examples a gate test runs under ``profile`` (and an optional --examples value)."""
    if override:
        return int(override)
    return max(1, settings.get_profile(profile).max_examples * WEIGHTS[test_name] // 25)
