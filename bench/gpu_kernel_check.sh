#!/usr/bin/env bash
# Issue 16's device check in one command and one time budget (default 460 s, one nvidia-h200-x2 call): are
# pull, push and auto correct, and how fast are they? Runs ci/gpu-check steps in three phases, keeps going
# past a failed step, and ends with a summary table (the device tool returns the last 12,000 characters).
#
#   bench/gpu_kernel_check.sh OUT_DIR [check|extra|summary]            (default: check)
#
#   check    1. `cacheprobe` (correctness first, ~30 s): one exact-input case each of pull (`fused`), push
#               (`FusedGemmRsPush`) and auto with both kernels (tests/kernel/protocol_impls.py:
#               AutoBothProtocols) at W = 2 on a shared GPU, every call bitwise vs torch mm + reduce-scatter
#               (the oracle) and the integer truth; its pass turns the host-wide kernel cache on.
#            2. at once, within what the budget leaves after the bench's reserve (at most 210 s):
#               `kernelgpu` (pytest tests/kernel -m gpu: the protocol cases of pull, push and auto on the
#               gate's harness at W = 2, 4, 8, the W = 1 GEMM of both protocols' tile configs), `autogate`
#               (the gate, smoke, -O, auto with both kernels, shared-gpu W = 2, 4, 8, 16, with a time limit),
#               `multigate` (the same on push and auto, multi-gpu W = 2: the interleaved order) and
#               `pushsanitize` (compute-sanitizer memcheck and racecheck, push, W = 2, small cases; reported
#               as TIMEOUT if they do not fit).
#            3. `benchrs` with the rest of the budget, the GPUs to itself: bench_gemm_rs.py, W = 2 multi-gpu,
#               N = 7168 K = 2048 and N = 8192 K = 14336, M = 128 .. 16384: pull, push, auto (this run's
#               faster-protocol table), mm+RS, async-TP, mm, the bound (NVLink measured in the run), ratios
#               side by side, the push A/B builds on the first shape; each shape's table printed as soon as it
#               is measured; it writes kernel/fused/crossover.json (copied to OUT_DIR).
#   extra    `pushmutants` (the GPU kill matrix of the push fault builds, ~9 min: a separate call).
#   summary  the summary of the step logs already in OUT_DIR (how the CPU tests exercise it).
#
# OUT_DIR receives at most five files (the device tool returns at most 8): summary.txt (what this prints),
# logs.tar.gz (every step log, gate report and sanitizer log), crossover.json, bench_rs_*.png. The logs are
# written under GPU_CHECK_LOGS (default: a fresh directory in /tmp). The last line reads
# `gpu_kernel_check: PASS (N steps)` only when every step ran and returned 0; a step killed at its time
# limit is TIMEOUT, a gate that reached its --time-limit with no failure so far CUT OFF (neither is a pass). GPU host without network: GEMM_RS_SYSTEM_PYTHON=1 (the default here) and
# the CuTe DSL bundle in .device/ (see /work/shared/device/README.md; the device tool's `carry: [".device"]`).
set -uo pipefail
out=${1:?usage: bench/gpu_kernel_check.sh OUT_DIR [check|extra|summary]}
phase=${2:-check}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GEMM_RS_SYSTEM_PYTHON=${GEMM_RS_SYSTEM_PYTHON:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$root"
t_start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-460}
left() { echo $((t_start + budget - $(date +%s))); }
clamp() { local v=$1 lo=$2 hi=$3; [ "$v" -lt "$lo" ] && v=$lo; [ "$v" -gt "$hi" ] && v=$hi; echo "$v"; }

if [ "$phase" = summary ]; then
  logs=$out
else
  logs=${GPU_CHECK_LOGS:-$(mktemp -d /tmp/gpu_kernel_check.XXXXXX)}
  mkdir -p "$logs"
  # the CuTe DSL bundle unpacked once, before steps start at once (ci/gpu-check sources setup.sh again: a no-op then)
  if ! . ci/setup.sh >"$logs/setup.log" 2>&1; then
    echo "setup failed (every step will fail): $(tail -3 "$logs/setup.log")"
  fi
  { nvidia-smi -L; nvidia-smi topo -m; } >"$logs/gpus.log" 2>&1
fi
run() {  # tag step...: ci/gpu-check with its own output file; the step logs land in $logs
  local tag=$1
  shift
  echo "[gpu_kernel_check] $(( $(date +%s) - t_start )) s: $* (budget left $(left) s)"
  "$root/ci/gpu-check" "$logs" "$@" >"$logs/gpu-check-$tag.out" 2>&1
}

case $phase in
  check)
    PROBE_LIMIT=$(clamp $(( $(left) - 300 )) 60 120) run probe cacheprobe
    a=$(clamp $(( $(left) - ${BENCH_RESERVE:-220} )) 90 "${PHASE2_MAX:-210}")
    export KERNEL_LIMIT=$a SANITIZE_LIMIT=$a GATE_SMOKE_LIMIT=$((a - 60)) PUSHGATE_POOLS_PER_GPU=${PUSHGATE_POOLS_PER_GPU:-2} \
      KERNEL_JOBS=${KERNEL_JOBS:-6}
    run kernel kernelgpu &
    run autogate autogate &
    run multigate multigate &
    run sanitize pushsanitize &
    wait
    BENCH_LIMIT=$(clamp $(( $(left) - 15 )) 60 400) run bench benchrs
    [ -f kernel/fused/crossover.json ] && cp kernel/fused/crossover.json "$logs/" ;;
  extra) run extra pushmutants ;;
  summary) ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac

status_of() {  # name rc -> the word the table shows (a gate cut off by its time limit with no failure: CUT OFF)
  if [ "$2" = 1 ] && grep -q "time limit of [0-9]*s reached" "$logs/$1.log" 2>/dev/null \
      && grep -qE "^[0-9]+ cases, 0 failed" "$logs/$1.log"; then
    echo "CUT OFF"
    return
  fi
  case $2 in
    0) echo PASS ;;
    124 | 137) echo TIMEOUT ;;
    99) echo "NO RESULT" ;;
    *) echo "FAIL rc=$2" ;;
  esac
}
detail_of() {  # step name -> one line from its log (its last line when nothing more telling is there)
  local f="$logs/$1.log" line
  [ -f "$f" ] || { echo "no log"; return; }
  line=$(detail_line "$1" "$f")
  [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$f" | tail -1)
  echo "${line:0:100}"
}
detail_line() {  # step log
  local f=$2
  case $1 in
    cacheprobe-*) grep -Eo "verdict: [A-Z_]+" "$f" | tail -1 ;;
    gate-*) { grep -E "^[0-9]+ cases, [0-9]+ failed" "$f" | tail -1 | cut -c1-60; grep -Eo "time limit of [0-9]+s reached" "$f" | head -1; } | paste -sd ';' ;;
    push-memcheck | push-racecheck) grep -E "^sanitizer [a-z]+: " "$f" | tail -1 | cut -d'(' -f1 ;;
    bench)
      local bad good
      bad=$(grep -cE "^ +[0-9]+ \| +FAIL" "$f") good=$(grep -cE "^ +[0-9]+ \| +ok" "$f")
      [ $((bad + good)) -eq 0 ] || echo "$bad M with a failed check; $good ok" ;;
    *) grep -E "[0-9]+ (passed|failed)" "$f" | tail -1 | cut -c1-80 ;;
  esac
}

summarize() {
  echo
  echo "=== gpu_kernel_check $phase: $(( $(date +%s) - t_start )) s (budget $budget s), logs in $logs"
  [ -f "$logs/gpus.log" ] && grep -E "^GPU [0-9]" "$logs/gpus.log" | head -2
  echo "--- steps"
  printf '  %-28s %-12s %7s  %s\n' step status seconds detail
  local name rc secs
  grep -h "^== [A-Za-z0-9_.-]*: rc=" "$logs"/gpu-check-*.out 2>/dev/null | while read -r _ name rc; do
    name=${name%:}
    rc=${rc#rc=}
    secs=$(grep -h "^== $name: took " "$logs"/gpu-check-*.out 2>/dev/null | tail -1 | awk '{print $4}')
    printf '  %-28s %-12s %7s  %s\n' "$name" "$(status_of "$name" "$rc")" "${secs:-?}" "$(detail_of "$name")"
  done
  if [ -f "$logs/kernelgpu.log" ]; then
    echo "--- kernel GPU tests"
    grep -E "^(FAILED|ERROR) " "$logs/kernelgpu.log" | cut -c1-200 | head -12
    tail -1 "$logs/kernelgpu.log" | sed '$a\' 
  fi
  for f in "$logs"/gate-*.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f" .log) (per W: cases, s/case)"
    grep -E "[0-9]+ cases, [0-9]+ failed|^\| [a-zA-Z0-9_.:,-]+ \| (shared|multi)-gpu \| [0-9]+ \| [0-9]+ \||time limit" "$f" \
      | cut -c1-160 | tail -10
    grep -E "^- [a-z]+ in |REPRO:" "$f" | cut -c1-300 | head -4
    grep -E "^VERDICT" "$f" | tail -1
  done
  for f in "$logs"/push-memcheck.log "$logs"/push-racecheck.log; do
    [ -f "$f" ] && echo "--- $(basename "$f" .log): $(grep -E "errors$|no ERROR SUMMARY|^sanitizer " "$f" | tail -3 | paste -sd ' ')"
  done
  if [ -f "$logs/bench.log" ]; then
    echo "--- bench (us; ratios: > 1 = ours faster; x/bnd: ours over the physical bound, 1 = the bound)"
    grep -E "^\[rank [0-9]+\] N=" "$logs/bench.log" | cut -c1-200 | head -6  # located mismatches of a failed check
    awk '/^(NVIDIA|H200).*W=[0-9]+ (multi|shared)-gpu/{p=1} p' "$logs/bench.log" | grep -vE "done:|UserWarning|return func" \
      | cut -c1-200 | tail -48
  fi
  [ -f "$logs/pushmutants.log" ] && { echo "--- push kill matrix"; tail -12 "$logs/pushmutants.log"; }
}

summarize | tee "$out/summary.txt"
( cd "$logs" && find . -maxdepth 4 \( -name '*.log' -o -name '*.out' -o -name '*.rc' -o -name '*.secs' -o -name '*.md' \
    -o -name '*.json' -o -name '*.jsonl' -o -name '*.xml' -o -name '*.txt' \) -not -path './kernel-cache/*' \
    -not -path './locks-*' -print0 | tar --null -czf "$out/logs.tar.gz" -T - ) \
  && echo "--- every log: $out/logs.tar.gz"
if [ "$logs" != "$out" ]; then
  [ -f "$logs/crossover.json" ] && cp "$logs/crossover.json" "$out/"
  cp "$logs"/bench_rs*.png "$out/" 2>/dev/null
fi
rcs=$(grep -h "^== [A-Za-z0-9_.-]*: rc=" "$logs"/gpu-check-*.out 2>/dev/null)
if [ -z "$rcs" ]; then
  echo "gpu_kernel_check: FAIL (no step ran)" | tee -a "$out/summary.txt"
  exit 1
fi
if grep -qv "rc=0$" <<<"$rcs"; then
  echo "gpu_kernel_check: FAIL ($(grep -cv "rc=0$" <<<"$rcs") of $(wc -l <<<"$rcs") steps did not pass)" | tee -a "$out/summary.txt"
  exit 1
fi
echo "gpu_kernel_check: PASS ($(wc -l <<<"$rcs") steps)" | tee -a "$out/summary.txt"
