"""The suite's xdist scheduling (tests/scheduling.py): the modules that share a compile of many kernel builds are one
unit of work, whatever pytest version keeps (or drops) xdist's ``@group`` node-id suffixes."""

from __future__ import annotations

import os

import pytest

from tests import scheduling

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Config:
    """What xdist's scheduler reads of the controller's config: ``--dist``, two local workers."""

    def __init__(self, dist: str):
        self.dist = dist

    def getvalue(self, name):
        return {"dist": self.dist, "tx": ["2*popen"]}[name]


def test_the_kernel_compile_modules_are_one_unit_of_work_and_the_rest_are_not():
    for path in scheduling.SCHEDULED_TOGETHER["kernel-compile"]:
        assert os.path.isfile(os.path.join(ROOT, path)), path  # a renamed module would silently leave the group
    pytest.importorskip("xdist")
    sched = scheduling.make_scheduler(_Config("loadgroup"), log=None)
    units = {sched._split_scope(n) for n in ("tests/kernel/test_fault_builds.py::test_a[pull]",
                                             "tests/kernel/test_fault_builds.py::test_b",
                                             "tests/kernel/test_fused_compile.py::test_c[kw0-224]")}
    assert units == {"kernel-compile"}
    other = "tests/foundation/test_tolerance_teeth.py::test_d"
    assert sched._split_scope(other) == other  # every other test its own unit
    assert sched._split_scope("fuzz/test_gemm_rs.py::test_compute[fused-shared-gpu-W2]@gpu-2") == "gpu-2"  # marks
    assert scheduling.make_scheduler(_Config("load"), log=None) is None  # other modes: xdist's own


def test_the_gates_gpu_tests_are_grouped_by_their_place_from_the_ids_as_the_workers_mark_them(monkeypatch):
    """The controller reads each GPU test's place from its id (fuzz/conftest.py: places_of_ids) and gets what the
    workers mark their items with (place_groups over (impl, topology, W, test)): every test of a place on one
    worker, whichever pytest drops xdist's ``@group`` suffixes. cpu tests stay units of their own."""
    pytest.importorskip("xdist")
    import fuzz.conftest as fc

    combos = [("fused", "shared-gpu", 2), ("fused", "shared-gpu", 4), ("fused", "shared-gpu", 8), ("unfused", "cpu", 2)]
    monkeypatch.setattr(fc, "gate_matrix", lambda cfg=None: combos)
    monkeypatch.setattr(fc, "gpu_count", lambda: 1)
    monkeypatch.setattr(fc, "pools_per_gpu", lambda value=None: 3)
    tests = ("test_compute", "test_layers", "test_capacity", "test_kernel_paths", "test_counter_wrap")
    marked = {f"fuzz/test_gemm_rs.py::{t}[{fc._gate_id(*c)}]": (*c, t) for c in combos for t in tests}
    workers = fc.place_groups(marked)  # what the workers' hook marks
    sched = scheduling.make_scheduler(_Config("loadgroup"), log=None)
    sched.collection = [*marked, "tests/kernel/test_fault_builds.py::test_a"]
    scopes = {n: sched._split_scope(n) for n in sched.collection}
    gpu = [n for n, c in marked.items() if c[1] == "shared-gpu"]
    assert {scopes[n] for n in gpu} == set(workers.values()) and len(set(workers.values())) == 3  # three places
    assert all(scopes[n] == workers[n] for n in gpu)
    assert all(scopes[n] == n for n, c in marked.items() if c[1] == "cpu")
    assert scopes["tests/kernel/test_fault_builds.py::test_a"] == "kernel-compile"


def test_ids_that_carry_xdists_group_suffix_keep_it(monkeypatch):
    """Where the workers' pytest keeps xdist's ``@group`` suffixes (pytest 8), they group the gate's tests and the
    controller computes nothing (no GPU questions asked there)."""
    pytest.importorskip("xdist")
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "places_of_ids", lambda ids: pytest.fail("computed places despite the suffixes"))
    sched = scheduling.make_scheduler(_Config("loadgroup"), log=None)
    sched.collection = ["fuzz/test_gemm_rs.py::test_compute[fused-shared-gpu-W2]@gpu-1", "fuzz/x.py::test_b"]
    assert sched._split_scope(sched.collection[0]) == "gpu-1"
    assert sched._split_scope(sched.collection[1]) == "fuzz/x.py::test_b"
