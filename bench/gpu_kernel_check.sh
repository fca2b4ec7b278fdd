#!/usr/bin/env bash
# Issue 16 on the GPU in one command (one device call, about 8 minutes on 2 H200s): is the push protocol
# (kernel/fused/gemm_rs_push.py) correct, and where does its time go? Runs ci/gpu-check steps, each with a
# time limit and a log in OUT_DIR, ends with compact tables (the device tool returns only the last 12,000
# characters) and packs every log into OUT_DIR/logs.tar.gz.
#
#   bench/gpu_kernel_check.sh OUT_DIR [push|correct|bench|extra|summary]   (default: push)
#
#   push    (default, ~8 min): `cacheprobe` (one exact case per protocol, W = 2, ranks loading what one of them
#           compiled: it turns the host-wide kernel cache on for the gates), then at once `pushgate` (the gate,
#           smoke, -O, push protocol, shared-gpu W = 2, 4, 8, 16: the push_first order), `pushmulti` (the same
#           on multi-gpu W = 2: the interleaved order, one GPU per rank) and `pushkernel` (pytest tests/kernel
#           -m "gpu or kernel" -k push: rs_worker.py's checks of both push orders on shared-gpu W = 2, 4, 8,
#           W = 1 GEMMs of the push tile configs, the push PTX and order tests); then `benchpush`
#           (bench_gemm.py: W = 1, every push tile config at M = 128..8192; bench_gemm_rs.py, W = 2
#           multi-gpu: pull, push, torch mm + NCCL RS, async-TP, torch.mm, the bound with the NVLink
#           bandwidth measured in the run, N = 7168 K = 2048 and N = 8192 K = 14336, M = 128..16384, and on
#           the first shape the push A/B builds push_first, ring4, local_push, no_mma; it writes
#           kernel/fused/crossover.json, copied under OUT_DIR)
#   correct / bench: the first iteration's phases (both protocols' gates at once; the bench without A/B)
#   extra   (~10 min): `pushsanitize` (memcheck, racecheck, push, W = 2) and `pushmutants` (kill matrix of
#           the four push fault builds)
# Success: the last line reads `gpu_kernel_check: PASS` (every step rc=0); the tables above it say what
# passed and what was measured. On a GPU host without network: GEMM_RS_SYSTEM_PYTHON=1 (the default here)
# and the CuTe DSL bundle in .device/ (see /work/shared/device/README.md).
set -uo pipefail
out=${1:?usage: bench/gpu_kernel_check.sh OUT_DIR [push|correct|bench|extra|summary]}
phase=${2:-push}
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
  push)
    run cacheprobe cacheprobe
    run pushgate pushgate &
    run pushmulti pushmulti &
    run pushkernel pushkernel &
    wait
    run bench benchpush
    [ -f kernel/fused/crossover.json ] && cp kernel/fused/crossover.json "$out/" ;;
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
for f in "$out/kernel.log" "$out/pushkernel.log"; do
  if [ -f "$f" ]; then
    echo "--- $(basename "$f" .log) tests"
    grep -E "^(FAILED|ERROR) " "$f" | head -15
    grep -E "RESULT W=" "$f" | head -8
    tail -1 "$f"
  fi
done
for f in "$out"/cacheprobe-*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E "verdict: [A-Z]+" -o "$f" | tail -1)"
done
for f in "$out"/gate-*.log; do
  [ -f "$f" ] || continue
  echo "--- $(basename "$f" .log)"
  grep -E "[0-9]+ cases, [0-9]+ failed|^\| [a-zA-Z.:-]+ \| (shared|multi)-gpu \| [0-9]+ \| [0-9]+ \||time limit" "$f" | tail -10
  grep -E "^- [a-z]+ in " "$f" | head -5
  grep -E "^VERDICT" "$f" | tail -1
done
if [ -f "$out/bench.log" ]; then
  echo "--- bench (W = 1 GEMM, push tiles)"
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \|" "$out/bench.log" | head -24
  echo "--- bench (GEMM-RS)"
  awk '/^(NVIDIA|H200|.*W=[0-9]+ (multi|shared)-gpu)/{p=1} p' "$out/bench.log" | grep -v "done:" | tail -60
fi
for f in "$out"/push-*.log; do
  [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verdict" "$f" | tail -2 | tr '\n' ' ')"
done
[ -f "$out/pushmutants.log" ] && { echo "--- push kill matrix"; tail -12 "$out/pushmutants.log"; }
( cd "$out" && find . -maxdepth 3 \( -name '*.log' -o -name '*.out' -o -name '*.rc' -o -name '*.md' \
    -o -name '*.json' -o -name '*.jsonl' -o -name '*.xml' -o -name '*.png' \) -not -path './kernel-cache/*' \
    -print0 | tar --null -czf logs.tar.gz -T - ) && echo "--- every log: $out/logs.tar.gz"
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
