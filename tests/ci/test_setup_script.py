"""ci/setup.sh is sourced by the README's commands and by users' own CI scripts: it must export what
the suite needs and leave the caller's shell options (``set -e``/``-u``/``pipefail``, shopt) alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
before=$(set +o; shopt -p)
. "$1/ci/setup.sh"
rc=$?
after=$(set +o; shopt -p)
[ "$before" = "$after" ] && echo "OPTIONS-UNCHANGED"
echo "rc=$rc"
echo "py=$GEMM_RS_PY"
echo "nvls=$NCCL_NVLS_ENABLE mc=$TORCH_SYMM_MEM_DISABLE_MULTICAST nvshmem=$NVSHMEM_DISABLE_NVLS"
"""


def test_sourcing_setup_leaves_shell_options_and_exports_the_environment():
    out = subprocess.run(["bash", "-c", SCRIPT, "bash", str(REPO)], capture_output=True, text=True,
                         timeout=600, cwd="/").stdout
    assert "OPTIONS-UNCHANGED" in out, out
    assert "rc=0" in out, out
    assert "py=" in out and "py=\n" not in out, out
    assert "nvls=0 mc=1 nvshmem=1" in out, out


def test_sourcing_setup_under_strict_options_keeps_them():
    script = "set -euo pipefail\n" + SCRIPT.replace("rc=$?", "rc=0")
    out = subprocess.run(["bash", "-c", script, "bash", str(REPO)], capture_output=True, text=True,
                         timeout=600, cwd="/").stdout
    assert "OPTIONS-UNCHANGED" in out, out


def test_the_packages_have_bytecode_for_python_O():
    """The gate and its ranks run under -O; pip writes only the plain .pyc. ci/setup.sh writes the -O ones, or each
    -O process would compile torch from source again where bytecode is not written at import
    (PYTHONDONTWRITEBYTECODE, read-only packages): 1.2-1.3 s per process, a CPU rank pool's start 2.4 -> 5.3 s."""
    import importlib.util
    import os
    import sys

    import hypothesis
    import pytest
    import torch

    if Path(sys.prefix).resolve() != (REPO / ".venv").resolve():
        pytest.skip(f"checks the project's .venv (ci/setup.sh's default), not {sys.prefix}: a system Python's "
                    f"packages may be read-only")
    for module in (torch, torch.nn, hypothesis, pytest):
        cached = importlib.util.cache_from_source(module.__file__, optimization=1)
        assert os.path.exists(cached), f"no -O bytecode for {module.__name__}: {cached}"
