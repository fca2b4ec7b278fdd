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
