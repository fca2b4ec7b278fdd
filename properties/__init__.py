"""Reusable checkers. Each is a small function returning a :class:`CheckResult` that renders like
``torch.testing.assert_close``; ``.raise_if_failed()`` turns a failure into an exception."""

from .alternation import fresh_per_call
from .ambient import ambient_changes, ambient_restore, ambient_since, ambient_snapshot, ambient_state_kept
from .device_fault import DEVICE_FAULT, device_fault, is_device_fault
from .exact import bitwise_equal
from .guards import Guarded, guard_regions_untouched
from .memory import live_tensors, memory_bounded, released_on_close, watch_release
from .nonfinite import nonfinite_pattern_matches
from .padding import SENTINEL, padded_rows_untouched, sentinel_like
from .path import declared_claim, declared_config_served, main_path_available, path_taken
from .rejection import call_raised, rejected_cleanly
from .repeatability import repeatable
from .result import CheckResult, PropertyViolation, skipped
from .result_contract import (
    caller_writes,
    fresh_padding_zero,
    fresh_result,
    inputs_changed,
    inputs_untouched,
    result_contract,
    results_unchanged,
    returns_out,
    watch_inputs,
)
from .tolerance import budget, within_tolerance

__all__ = [
    "DEVICE_FAULT",
    "SENTINEL",
    "CheckResult",
    "Guarded",
    "PropertyViolation",
    "ambient_changes",
    "ambient_restore",
    "ambient_since",
    "ambient_snapshot",
    "ambient_state_kept",
    "bitwise_equal",
    "budget",
    "call_raised",
    "declared_claim",
    "declared_config_served",
    "device_fault",
    "fresh_padding_zero",
    "fresh_per_call",
    "fresh_result",
    "guard_regions_untouched",
    "caller_writes",
    "inputs_changed",
    "inputs_untouched",
    "is_device_fault",
    "live_tensors",
    "main_path_available",
    "memory_bounded",
    "nonfinite_pattern_matches",
    "padded_rows_untouched",
    "path_taken",
    "rejected_cleanly",
    "released_on_close",
    "repeatable",
    "result_contract",
    "results_unchanged",
    "returns_out",
    "sentinel_like",
    "skipped",
    "watch_inputs",
    "watch_release",
    "within_tolerance",
]
