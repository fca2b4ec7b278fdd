"""Compatibility re-export: what a rank does with a case lives in :mod:`fuzz.families` (one module per
family). ``fuzz/rank_worker.py`` and tests/engine import these names from here."""

from .families import RankContext, describe_exception, run_case
from .families.context import aligned_if_waived
from .families.verified import digest

__all__ = ["RankContext", "aligned_if_waived", "describe_exception", "digest", "run_case"]
