#!/usr/bin/env bash
# Set-up shared by the README's two commands. Source it: `. ci/setup.sh || exit 1`.
#
# Default: a project virtual environment in .venv (created once, refreshed when pyproject.toml changes)
# with torch (2.13.0 CPU build unless torch is already importable there), the suite and its test,
# kernel and report extras. GEMM_RS_SYSTEM_PYTHON=1: use the python3 on PATH as it is (a GPU host with
# torch and pytest installed and no network); a CuTe DSL bundle in .device/ is unpacked to /tmp/site.
# Always: multicast off for this shell and every child.
#
# Sourcing it changes no shell option of the caller (no `set -e`, `-u` or `pipefail` left behind): the
# work is one function whose every step checks its own status; it returns non-zero on failure.

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
    if ! "$GEMM_RS_PY" -c "import cutlass" 2>/dev/null && [ -n "$bundle" ]; then
      [ -d /tmp/site/nvidia_cutlass_dsl ] || tar -xJf "$bundle" -C /tmp || return 1
      export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
    fi
  else
    venv="$root/.venv"
    stamp="$venv/.gemm-rs-installed"
    want=$(sha256sum < "$root/pyproject.toml" | cut -c1-16) || return 1
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
      echo "$want" > "$stamp"
    fi
    GEMM_RS_PY="$venv/bin/python"
  fi
  export GEMM_RS_PY
}

_gemm_rs_setup
_gemm_rs_status=$?
unset -f _gemm_rs_setup
# `return` when sourced (the normal use), `exit` when run as a script
return $_gemm_rs_status 2>/dev/null || exit $_gemm_rs_status
