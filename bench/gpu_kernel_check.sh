#!/usr/bin/env bash
# Issue 16 on the GPU in one command: is the push protocol (kernel/fused/gemm_rs_push.py) correct, and how
# fast are both protocols? Runs ci/gpu-check steps in order, each with a time limit and a log in OUT_DIR,
# and ends with compact tables (the device tool returns only the end of the output).
#
#   bench/gpu_kernel_check.sh OUT_DIR [correct|bench|extra|all|summary]   (default: all = correct, then bench)
#
#   correct (~6 min): `cacheprobe` (one exact case per protocol at W = 2, ranks loading the kernel one of them
#                     compiled: the host-wide cache), then at once `kernel` (pytest tests/kernel -m "gpu or
#                     kernel": W = 1 GEMM of both protocols' tile configs, the pull protocol at W = 2, 4, 8,
#                     the cached-kernel GEMM, the CPU PTX tests) and `protocols` (the gate, smoke profile,
#                     PYTHONOPTIMIZE=1, shared-gpu W = 2, 4, 8, 16, pull and push side by side)
#   bench   (~5 min): `bench` (bench_gemm.py, push tiles, W = 1; bench_gemm_rs.py under torchrun W = 2: both
#                     protocols, torch mm + NCCL RS, async-TP, torch.mm, the physical bound with the NVLink
#                     bandwidth measured in the run, N = 7168 K = 2048 and N = 8192 K = 14336, M = 128..16384;
#                     on 2 GPUs it writes kernel/fused/crossover.json, which comes back under OUT_DIR)
#   extra   (~10 min): `pushsanitize` (memcheck, racecheck, push, W = 2) and `pushmutants` (kill matrix of
#                     the four push fault builds)
# Success: the last line reads `gpu_kernel_check: PASS` (every step rc=0); the tables above it say what
# passed and what was measured. On a GPU host without network: GEMM_RS_SYSTEM_PYTHON=1 (the default here)
# and the CuTe DSL bundle in .device/ (see /work/shared/device/README.md).
set -uo pipefail
out=${1:?usage: bench/gpu_kernel_check.sh OUT_DIR [correct|bench|extra|all]}
phase=${2:-all}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GEMM_RS_SYSTEM_PYTHON=${GEMM_RS_SYSTEM_PYTHON:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$root"

run() {  # ci/gpu-check with its own output file; the step logs land in $out
  local tag=$1
  shift
  "$root/ci/gpu-check" "$out" "$@" >"$out/gpu-check-$tag.out" 2>&1
}
t_start=$(date +%s)
case $phase in
  correct | all)
    run cacheprobe cacheprobe
    run kernel kernel &
    run protocols protocols &
    wait ;;&
  bench | all)
    run bench bench
    [ -f kernel/fused/crossover.json ] && cp kernel/fused/crossover.json "$out/" ;;
  extra)
    run extra pushsanitize pushmutants ;;
  correct | summary) ;;  # summary: print the tables of an earlier run in OUT_DIR again
  *) echo "unknown phase $phase"; exit 2 ;;
esac

echo
echo "=== gpu_kernel_check $phase: $(( $(date +%s) - t_start )) s, logs in $out"
echo "--- steps"
grep -h "^== [A-Za-z0-9_.-]*: rc=" "$out"/gpu-check-*.out 2>/dev/null | sed 's/^== /  /'
if [ -f "$out/kernel.log" ]; then
  echo "--- kernel tests"
  grep -E "^(FAILED|ERROR) " "$out/kernel.log" | head -15
  tail -1 "$out/kernel.log"
fi
for f in "$out"/cacheprobe-*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E "verdict: [A-Z]+" -o "$f" | tail -1)"
done
for f in "$out"/gate-*.log; do
  [ -f "$f" ] || continue
  echo "--- $(basename "$f" .log)"
  grep -E "[0-9]+ cases, [0-9]+ failed|^\| [a-z-]+ \| shared-gpu \| [0-9]+ \| [0-9]+ \||time limit" "$f" | tail -10
  grep -E "^- [a-z]+ in " "$f" | head -5
  grep -E "^VERDICT" "$f" | tail -1
done
if [ -f "$out/bench.log" ]; then
  echo "--- bench (W = 1 GEMM, push tiles)"
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \|" "$out/bench.log" | head -8
  echo "--- bench (GEMM-RS)"
  awk '/^(NVIDIA|H200|.*W=[0-9]+ (multi|shared)-gpu)/{p=1} p' "$out/bench.log" | grep -v "done:" | tail -40
fi
for f in "$out"/push-*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verdict" "$f" | tail -2 | tr '\n' ' ')"
done
[ -f "$out/pushmutants.log" ] && { echo "--- push kill matrix"; tail -12 "$out/pushmutants.log"; }
rcs=$(grep -h "^== [A-Za-z0-9_.-]*: rc=" "$out"/gpu-check-*.out 2>/dev/null)
if [ -z "$rcs" ]; then
  echo "gpu_kernel_check: FAIL (no step ran)"
  exit 1
fi
if grep -qv "rc=0$" <<<"$rcs"; then
  echo "gpu_kernel_check: FAIL"
  exit 1
fi
echo "gpu_kernel_check: PASS ($(wc -l <<<"$rcs") steps)"
