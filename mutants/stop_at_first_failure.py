"""pytest plugin for kill runs (``-p mutants.stop_at_first_failure``): the active Hypothesis profile
(``ci`` or ``nightly``, same examples, same derandomization) minus the shrink, target and explain
phases. A kill run needs the first failing example, not a minimal one: shrinking a multi-rank case costs
tens to hundreds of cases, and a hang costs the case deadline each time. ``pytest -x`` stops the
session at that first failure."""

from __future__ import annotations


def pytest_configure(config):
    # After the root conftest loaded the profile, before the test modules are imported (their
    # @settings(...) take the loaded profile as parent at import).
    from hypothesis import Phase, settings

    from fuzz.settings import PROFILE

    name = f"{PROFILE}-stop-at-first-failure"
    settings.register_profile(name, parent=settings.get_profile(PROFILE),
                              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile(name)
