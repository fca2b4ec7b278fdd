#!/usr/bin/env bash
# Set-up shared by the README's two commands. Source it: `. ci/setup.sh`.
#
# Default: a project virtual environment in .venv (created once, refreshed when pyproject.toml changes)
# with torch (2.13.0 CPU build unless torch is already importable there), the suite and its test,
# kernel and report extras. GEMM_RS_SYSTEM_PYTHON=1: use the python3 on PATH as it is (a GPU host with
# torch and pytest installed and no network); a CuTe DSL bundle in .device/ is unpacked to /tmp/site.
# Always: multicast off for this shell and every child.
set -euo pipefail
GEMM_RS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GEMM_RS_ROOT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$GEMM_RS_ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [ "${GEMM_RS_SYSTEM_PYTHON:-0}" = "1" ]; then
  GEMM_RS_PY=$(command -v python3)
  bundle=$(ls "$GEMM_RS_ROOT"/.device/cutlass-dsl-*.tar.xz 2>/dev/null | head -1 || true)
  if ! "$GEMM_RS_PY" -c "import cutlass" 2>/dev/null && [ -n "$bundle" ]; then
    [ -d /tmp/site/nvidia_cutlass_dsl ] || tar -xJf "$bundle" -C /tmp
    export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
  fi
else
  venv="$GEMM_RS_ROOT/.venv"
  stamp="$venv/.gemm-rs-installed"
  want=$(cat "$GEMM_RS_ROOT/pyproject.toml" | sha256sum | cut -c1-16)
  if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv"
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "[setup] installing the suite into $venv (first run takes about a minute)" >&2
    log="$venv/install.log"
    {
      "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/python" -m pip install "torch==2.13.0"
      "$venv/bin/python" -m pip install -e "$GEMM_RS_ROOT[test,kernel,report]"
    } >"$log" 2>&1 || { tail -40 "$log" >&2; echo "[setup] install failed; full log: $log" >&2; exit 1; }
    echo "$want" > "$stamp"
  fi
  GEMM_RS_PY="$venv/bin/python"
fi
export GEMM_RS_PY
