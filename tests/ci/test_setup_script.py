"""ci/setup.sh is sourced by the README's commands and by users' own CI scripts: it must export what
the suite needs and leave the caller's shell options (``set -e``/``-u``/``pipefail``, shopt) alone."""

from __future__ import annotations

import os
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


FAKE_PYTHON = r"""#!/usr/bin/env bash
# python3 for GEMM_RS_SYSTEM_PYTHON=1: says where its packages are, and logs each bytecode compile
case "$*" in
  *compileall*) echo compiled >> "$FAKE_LOG" ;;
  *getsitepackages*) echo "$FAKE_SITE" ;;
  *) exit 0 ;;
esac
"""


def test_system_python_bytecode_is_compiled_once_until_its_packages_change(tmp_path):
    """GEMM_RS_SYSTEM_PYTHON=1 (the GPU hosts): the -O bytecode of the system python's packages is written at the
    first source and skipped at the next (checking every file again took 10-15 s each time ``ci/gate`` started),
    until a package is installed or removed there."""
    bindir, site, tmp = tmp_path / "bin", tmp_path / "site", tmp_path / "tmp"
    for d in (bindir, site, tmp):
        d.mkdir()
    (bindir / "python3").write_text(FAKE_PYTHON)
    (bindir / "python3").chmod(0o755)
    log = tmp_path / "compiles.log"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "GEMM_RS_SYSTEM_PYTHON": "1", "TMPDIR": str(tmp),
           "FAKE_LOG": str(log), "FAKE_SITE": str(site), "HOME": str(tmp_path)}

    def source():
        out = subprocess.run(["bash", "-c", SCRIPT, "bash", str(REPO)], capture_output=True, text=True,
                             timeout=120, cwd="/", env=env)
        assert "rc=0" in out.stdout and f"py={bindir}/python3" in out.stdout, out.stdout + out.stderr
        return log.read_text().count("compiled") if log.exists() else 0

    assert source() == 1
    assert source() == 1, "compiled again though nothing changed"
    os.utime(tmp / next(p.name for p in tmp.iterdir()), (1, 1))  # the stamp older than the folder: a change
    (site / "newpkg").mkdir()
    assert source() == 2, "a package installed, yet not compiled"
    assert source() == 2


def test_the_default_set_up_uses_the_project_venv_python():
    """Without GEMM_RS_SYSTEM_PYTHON=1, every command runs the .venv's python (the torch and packages set-up
    installed), never whatever python3 comes first on PATH."""
    if os.environ.get("GEMM_RS_SYSTEM_PYTHON") == "1":
        import pytest

        pytest.skip("this host runs the system python (GEMM_RS_SYSTEM_PYTHON=1): there is no .venv to check")
    env = {k: v for k, v in os.environ.items() if k not in ("GEMM_RS_SYSTEM_PYTHON", "GEMM_RS_PY")}
    out = subprocess.run(["bash", "-c", SCRIPT, "bash", str(REPO)], capture_output=True, text=True, timeout=600,
                         cwd="/", env=env).stdout
    assert f"py={REPO}/.venv/bin/python\n" in out, out


VENV_PYTHON = r"""#!/usr/bin/env bash
# the python of a fresh venv: no torch; pip logs what it installs, torch's install exits $FAKE_TORCH_RC
case "$*" in
  *"import torch"*) exit 1 ;;
  *"pip install torch"*) echo "pip $*" >> "$FAKE_LOG"; exit "$FAKE_TORCH_RC" ;;
  *"pip install"*) echo "pip $*" >> "$FAKE_LOG"; exit 0 ;;
  *) exit 0 ;;
esac
"""

BASE_PYTHON = r"""#!/usr/bin/env bash
# $PYTHON for the set-up: `-m venv DIR` makes DIR/bin/python the fake above
[ "$1 $2" = "-m venv" ] || exit 1
mkdir -p "$3/bin" && cp "$FAKE_VENV_PYTHON" "$3/bin/python" && chmod +x "$3/bin/python"
"""


def test_a_failed_torch_install_fails_the_set_up_and_is_tried_again(tmp_path):
    """A fresh .venv whose torch install fails: sourcing ci/setup.sh returns non-zero and leaves no stamp (the next
    run tries again), instead of going on without torch or with another one; torch's pinned version is what pip
    is asked for."""
    root = tmp_path / "repo"
    (root / "ci").mkdir(parents=True)
    for f in ("ci/setup.sh", "pyproject.toml"):
        (root / f).write_bytes((REPO / f).read_bytes())
    venv_py, base_py, log = tmp_path / "venv_python", tmp_path / "python", tmp_path / "pip.log"
    for path, text in ((venv_py, VENV_PYTHON), (base_py, BASE_PYTHON)):
        path.write_text(text)
        path.chmod(0o755)
    stamp = root / ".venv" / ".gemm-rs-installed"

    def source(torch_rc: int) -> str:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PYTHON": str(base_py),
               "FAKE_VENV_PYTHON": str(venv_py), "FAKE_LOG": str(log), "FAKE_TORCH_RC": str(torch_rc)}
        r = subprocess.run(["bash", "-c", SCRIPT, "bash", str(root)], capture_output=True, text=True, timeout=60,
                           cwd="/", env=env)
        return r.stdout + r.stderr

    out = source(1)
    assert "rc=1" in out and "install failed" in out, out
    assert not stamp.exists(), "a failed install was stamped as done: the next run would not install again"
    out = source(0)
    assert "rc=0" in out and f"py={root}/.venv/bin/python" in out, out
    assert stamp.exists(), out
    pips = log.read_text().splitlines()
    assert len(pips) == 3 and pips[:2] == ["pip -m pip install torch==2.13.0"] * 2, pips
    assert pips[2].startswith("pip -m pip install -e"), pips
