#!/usr/bin/env bash
# Set-up shared by the README's two commands. Source it: `. ci/setup.sh || exit 1`.
#
# Default: a project virtual environment in .venv (created once, refreshed when pyproject.toml changes)
# with torch (2.13.0 CPU build unless torch is already importable there), the suite and its test,
# kernel and report extras. GEMM_RS_SYSTEM_PYTHON=1: use the python3 on PATH as it is (a GPU host with
# torch and pytest installed and no network); a CuTe DSL bundle in .device/ is unpacked to /tmp/site.
# Always: multicast off for this shell and every child; bytecode for `python -O` (below).
#
# Sourcing it changes no shell option of the caller (no `set -e`, `-u` or `pipefail` left behind): the
# work is one function whose every step checks its own status; it returns non-zero on failure.

# Bytecode for `python -O` (the system python's packages here; the .venv's: _gemm_rs_warm_bytecode), how the gate
# and its ranks run: pip writes only the plain .pyc, so where
# PYTHONDONTWRITEBYTECODE is set (or the packages are read-only) every -O process compiled torch and the rest
# from source again -- 1.2-1.3 s more per process on this project's CI machine: a CPU rank pool of W = 2 started in
# 5.3 s, 2.4 s with the .opt-1.pyc written here; one mutant of the kill matrix 11.0 s -> 6.4 s. Best effort, never
# a failure: a file of another Python's syntax (torch ships some) or a read-only folder only leaves it as it was.
_gemm_rs_bytecode() {
  local py=$1 dirs stamp
  dirs=$("$py" -c 'import os, site, sys, sysconfig
found = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], *sys.argv[1:]]
print("\n".join(d for d in dict.fromkeys(found) if os.access(d, os.W_OK)))' "${@:2}" 2>/dev/null) || return 0
  [ -n "$dirs" ] || return 0  # nothing writable: nothing to do (a compile here could not be kept)
  # Done once per (python, folders) while no folder's entries change (a package installed or removed): checking
  # every file again took the GPU host's system python (torch, the CuTe DSL bundle) 10-15 s at each source.
  stamp="${TMPDIR:-/tmp}/gemm-rs-bytecode-$(printf '%s\n' "$py" "$dirs" | sha256sum | cut -c1-16)"
  # shellcheck disable=SC2086 -- one folder per line
  if [ -f "$stamp" ] && [ -z "$(IFS=$'\n'; find $dirs -maxdepth 1 -newer "$stamp" -print -quit 2>/dev/null)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086 -- one folder per line
  (IFS=$'\n'; "$py" -O -m compileall -q -j 0 $dirs >/dev/null 2>&1)
  touch "$stamp" 2>/dev/null
  return 0
}

# The project's .venv: the -O bytecode of what -O processes import (the gate's pytest and xdist workers, torchrun's
# agent that forks the ranks, campaigns, kill sessions), written by importing it once with bytecode writing on --
# about 1100 modules, where compiling every file of the environment (9000, sympy and pip included) took 33 s of
# the CI machine's set-up -- and of this repository's packages. Best effort, never a failure.
_gemm_rs_warm_bytecode() {
  local py=$1 root=$2
  (cd "$root" && PYTHONDONTWRITEBYTECODE= "$py" -O -c '
import importlib
for name in ("torch", "torch.distributed.run", "numpy", "pytest", "xdist", "xdist.remote", "execnet", "hypothesis",
             "matplotlib.pyplot"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
' >/dev/null 2>&1)
  "$py" -O -m compileall -q "$root/fuzz" "$root/kernel" "$root/oracle" "$root/properties" "$root/mutants" \
    >/dev/null 2>&1
  return 0
}

_gemm_rs_setup() {
  local root venv stamp want log bundle
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
  GEMM_RS_ROOT=$root
  export GEMM_RS_ROOT
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

  if [ "${GEMM_RS_SYSTEM_PYTHON:-0}" = "1" ]; then
    GEMM_RS_PY=$(command -v python3) || { echo "[setup] no python3 on PATH" >&2; return 1; }
    bundle=$(ls "$root"/.device/cutlass-dsl-*.tar.xz 2>/dev/null | head -1)
    # find_spec, not an import: importing the CuTe DSL took seconds at every source
    if ! "$GEMM_RS_PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass') is None)" 2>/dev/null \
        && [ -n "$bundle" ]; then
      [ -d /tmp/site/nvidia_cutlass_dsl ] || tar -xJf "$bundle" -C /tmp || return 1
      export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
    fi
    _gemm_rs_bytecode "$GEMM_RS_PY" $([ -d /tmp/site ] && echo /tmp/site)
  else
    venv="$root/.venv"
    stamp="$venv/.gemm-rs-installed"
    want=$(sha256sum < "$root/pyproject.toml" | cut -c1-16)+O2 || return 1  # +O2: -O bytecode of what -O imports
    if [ ! -x "$venv/bin/python" ]; then
      echo "[setup] creating $venv" >&2
      "${PYTHON:-python3}" -m venv "$venv" || return 1
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
      echo "[setup] installing the suite into $venv (first run takes about a minute)" >&2
      log="$venv/install.log"
      {
        "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/python" -m pip install "torch==2.13.0"
      } >"$log" 2>&1 && "$venv/bin/python" -m pip install -e "$root[test,kernel,report]" >>"$log" 2>&1 || {
        tail -40 "$log" >&2
        echo "[setup] install failed; full log: $log" >&2
        return 1
      }
      _gemm_rs_warm_bytecode "$venv/bin/python" "$root"
      echo "$want" > "$stamp"
    fi
    GEMM_RS_PY="$venv/bin/python"
  fi
  export GEMM_RS_PY
}

_gemm_rs_setup
_gemm_rs_status=$?
unset -f _gemm_rs_setup _gemm_rs_bytecode
# `return` when sourced (the normal use), `exit` when run as a script
return $_gemm_rs_status 2>/dev/null || exit $_gemm_rs_status
