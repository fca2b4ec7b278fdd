"""Reusable checkers. Each is a small function returning a :class:`CheckResult` that renders like
``torch.testing.assert_close``; ``.raise_if_failed()`` turns a failure into an exception."""

from .alternation import fresh_per_call
from .exact import bitwise_equal
from .guards import Guarded, guard_regions_untouched
from .nonfinite import nonfinite_pattern_matches
from .padding import SENTINEL, padded_rows_untouched, sentinel_like
from .rejection import rejected_cleanly
from .repeatability import repeatable
from .result import CheckResult, PropertyViolation, skipped
from .tolerance import budget, within_tolerance

__all__ = [
    "SENTINEL",
    "CheckResult",
    "Guarded",
    "PropertyViolation",
    "bitwise_equal",
    "budget",
    "fresh_per_call",
    "guard_regions_untouched",
    "nonfinite_pattern_matches",
    "padded_rows_untouched",
    "rejected_cleanly",
    "repeatable",
    "sentinel_like",
    "skipped",
    "within_tolerance",
]
