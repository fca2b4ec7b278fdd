"""Implementations by name. A name is a key of IMPLEMENTATIONS or any ``module:attribute`` spec,
so third-party adapters and planted-bug mutants load the same way as ours."""

from __future__ import annotations

import importlib

from .errors import UnsupportedConfigError

IMPLEMENTATIONS: dict[str, str] = {
    "unfused": "kernel.unfused:UnfusedGemmRs",
    "fused": "kernel.fused:FusedGemmRs",
    "torch-async-tp": "kernel.adapters.torch_async_tp:TorchAsyncTpGemmRs",
}


def load_implementation(spec: str):
    """Return the implementation class (or factory) that ``spec`` names."""
    target = IMPLEMENTATIONS.get(spec, spec)
    if ":" not in target:
        raise UnsupportedConfigError(
            f"unknown implementation {spec!r}: use one of {sorted(IMPLEMENTATIONS)} or 'module:attribute'"
        )
    module_name, attr = target.split(":", 1)
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise UnsupportedConfigError(f"{module_name} has no attribute {attr!r}") from exc
