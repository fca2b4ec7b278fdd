"""Fixtures the engine's test modules share."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def own_settings(monkeypatch):
    """A tool's ``main`` run in this process (``fuzz.sanitize``, ``fuzz.differential``) installs its flags as the
    process's settings and exports them to the environment for its ranks (fuzz/config.py): put both back after
    the test, for the tests that follow in this worker (a leaked ``GEMM_RS_IMPL`` made a later ``fuzz.repro``
    run the leaked implementation too)."""
    from fuzz import config

    saved = {k: v for k, v in os.environ.items() if k.startswith(config.ENV_PREFIX)}
    monkeypatch.setattr(config, "_CURRENT", config._CURRENT)
    yield
    for k in [k for k in os.environ if k.startswith(config.ENV_PREFIX)]:
        del os.environ[k]
    os.environ.update(saved)
