"""The suite's xdist scheduling (the root conftest.py's ``pytest_xdist_make_scheduler``): test modules that must run
on one worker, grouped by path.

The modules of :data:`SCHEDULED_TOGETHER` share one compile of many kernel builds (module-scoped fixtures over the
host-wide kernel cache): on a cold CI machine each worker that runs one of their tests compiles the whole plan, 45 s
of a core each. Their ``xdist_group("kernel-compile")`` mark did that until pytest 9: xdist 3.8 renames a marked
test's ``_nodeid`` (``...@kernel-compile``), which pytest 9 no longer reads (a node's id is its ``_id``), so every
marked test was its own unit and both workers compiled the plan (22nd session: `.ci/run`'s two slowest setups, 47.6 s
and 45.4 s). The path table is now their only grouping (the marks are gone: one declaration, any pytest).

The gate's GPU tests (``fuzz/``) are grouped the same way by their GPU place, which the scheduler computes from the
test ids as the workers do from their items (fuzz/conftest.py: ``place_groups``): a user's multi-GPU CI with
pytest 9 would otherwise run every GPU test with a pool of its own (seen with the marks ignored on 2xH200: 20 pools
time-slicing one GPU, cases past their deadline -- false hangs). xdist's ``@group`` suffixes, where the workers'
pytest keeps them (pytest 8 on the GPU hosts lent here), give the same groups.
"""

from __future__ import annotations

SCHEDULED_TOGETHER = {"kernel-compile": ("tests/kernel/test_fault_builds.py", "tests/kernel/test_fused_compile.py")}


def scheduling_unit(nodeid: str) -> str | None:
    """The group a test id belongs to by :data:`SCHEDULED_TOGETHER`, else None."""
    path = nodeid.split("::", 1)[0]
    return next((group for group, files in SCHEDULED_TOGETHER.items() if path in files), None)


def make_scheduler(config, log):
    """xdist's ``loadgroup`` scheduling, the groups of :data:`SCHEDULED_TOGETHER` read from the ids' paths; None
    (xdist's own) for any other ``--dist``."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class PathGroupScheduling(LoadGroupScheduling):
        places: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.places is None:  # first call: the collection is complete (LoadScopeScheduling.schedule)
                self.places = gate_places(self.collection or [])
            return scheduling_unit(nodeid) or self.places.get(nodeid) or super()._split_scope(nodeid)

    return PathGroupScheduling(config, log)


def gate_places(nodeids: list[str]) -> dict[str, str]:
    """The gate's GPU tests -> their place's group (fuzz/conftest.py: ``places_of_ids``, the deal the workers mark
    their items with), read from the ids: a GPU place's tests share its pools and GPU slot, and on pytest 9 the
    marks never reach the scheduler. Empty when no gate test (``fuzz/``) was collected, or where the ids carry
    xdist's suffixes (the workers' pytest keeps them: they group the gate's tests, and the settings' GPU questions
    -- torch imported in the controller -- are not asked)."""
    if not any(n.startswith("fuzz/") for n in nodeids) or any("@" in n for n in nodeids):
        return {}
    from fuzz.conftest import places_of_ids

    return places_of_ids(nodeids)
