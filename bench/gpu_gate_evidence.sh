#!/usr/bin/env bash
# The gate's own GPU evidence in one device call (issues 13, 14, 15, 17; nvidia-h200-x2, one time budget):
#
#   bench/gpu_gate_evidence.sh OUT_DIR            (GATE_EVIDENCE_BUDGET seconds in all, default 500)
#
# phase 1, at once (each with its own GPU lease directory, so none waits for another's leases):
#   verdicts     ci/gpu-check verdicts: the README's gate command for `fused` on a copy of the tree without the
#                CuTe DSL bundle (must end FAIL with the reason), then with it (PASS, "fused: 100% fused path")
#   gpumutants   the GPU kill matrix of the dimension mutants (mutants/dimension_faults.py: stream ordering,
#                an epoch baked in at capture, the global rank at launch, a workspace shared across groups)
#   bytes        the nightly byte-boundary family (workspace and output crossing 2^31 and 2^32 bytes), fused
# phase 2, at once, with what is left: the ci-profile gate of `fused` with every family the default strategies
#   draw (layouts, instances, streams, deep graphs, dispatch, tails, views, bias, batch invariance) on
#   shared-gpu W = 2, 4, 8 and on multi-gpu W = 2; their progress lines give verified cases/min.
# OUT_DIR receives summary.txt and evidence.tar.gz (every log and report). Multicast off throughout. Exit status
# 0 only where every step returned 0.
set -uo pipefail
out=${1:?usage: bench/gpu_gate_evidence.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export GEMM_RS_SYSTEM_PYTHON=${GEMM_RS_SYSTEM_PYTHON:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 PYTHONUNBUFFERED=1
export GEMM_RS_KERNEL_CACHE_DIR=${GEMM_RS_KERNEL_CACHE_DIR:-/tmp/gemm-rs-kernels}
logs=$(mktemp -d /tmp/gpu_gate_evidence.XXXXXX)
t_start=$(date +%s)
budget=${GATE_EVIDENCE_BUDGET:-500}
left() { echo $((t_start + budget - $(date +%s))); }
. ci/setup.sh >"$logs/setup.log" 2>&1 || echo "setup failed: $(tail -3 "$logs/setup.log")"
py=$GEMM_RS_PY
{ nvidia-smi -L; nvidia-smi topo -m; } >"$logs/gpus.log" 2>&1

bg() {  # name limit command...: in the background, $logs/NAME.log, .rc, .secs
  local name=$1 limit=$2
  shift 2
  echo "[evidence] $(( $(date +%s) - t_start )) s: $name (limit ${limit}s)"
  ( t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
    echo $? >"$logs/$name.rc"
    echo $(( $(date +%s) - t0 )) >"$logs/$name.secs" ) &
}

# phase 1
p1=${PHASE1_LIMIT:-200}
bg verdicts "$p1" env GEMM_RS_GPU_LOCK_DIR="$logs/locks-verdicts" VERDICT_LIMIT=$((p1 / 2 - 10)) \
    ./ci/gpu-check "$logs/verdicts" verdicts
bg gpumutants "$p1" env GEMM_RS_GPU_LOCK_DIR="$logs/locks-mutants" "$py" -m mutants.meta --gpu --optimize 1 \
    --jobs 5 --no-correct --impl FusedSideStreamNoWait,FusedCallerDoesNotWait,FusedEpochBakedAtCapture,FusedGlobalRankAtLaunch,FusedWorkspaceSharedAcrossGroups \
    --report-dir "$logs/gpumutants"
bg bytes "$p1" env GEMM_RS_GPU_LOCK_DIR="$logs/locks-bytes" GEMM_RS_BYTE_BOUNDARIES=1 PYTHONOPTIMIZE=1 \
    "$py" -m pytest fuzz/test_gemm_rs.py -q -k byte_boundaries --impl fused --topology shared-gpu \
    --world-sizes 1,2 -p no:cacheprovider -rs
wait

# phase 2
p2=$(( $(left) - 25 ))
[ "$p2" -gt 60 ] || p2=60
for topo in shared-gpu multi-gpu; do
  ws=2,4,8
  [ "$topo" = multi-gpu ] && ws=2
  bg "gate-$topo" "$((p2 + 20))" env GEMM_RS_GPU_LOCK_DIR="$logs/locks-$topo" ./ci/gate --profile ci \
      --impl fused --topology "$topo" --world-sizes "$ws" --time-limit "$p2" --report-dir "$logs/gate-$topo"
done
wait

# summary
{
  echo "=== gpu_gate_evidence: $(( $(date +%s) - t_start )) s (budget ${budget} s); $(head -2 "$logs/gpus.log" | tr '\n' ' ')"
  for name in verdicts gpumutants bytes gate-shared-gpu gate-multi-gpu; do
    printf '%-16s rc=%-4s %5ss\n' "$name" "$(cat "$logs/$name.rc" 2>/dev/null || echo '?')" \
      "$(cat "$logs/$name.secs" 2>/dev/null || echo '?')"
  done
  echo "--- verdicts"
  grep -hE "^== verdict|VERDICT|fused: |cases, .* failed" "$logs/verdicts.log" | tail -12
  grep -h -m3 -E "cannot be built|main_path_available" -r "$logs/verdicts/verdict-nobundle" 2>/dev/null | cut -c1-300
  echo "--- gpu mutants"
  tail -15 "$logs/gpumutants.log"
  echo "--- byte boundaries"
  tail -6 "$logs/bytes.log"
  for topo in shared-gpu multi-gpu; do
    echo "--- gate $topo"
    grep -h "^\[gate\]" "$logs/gate-$topo.log" | tail -3
    [ -f "$logs/gate-$topo/summary.md" ] && head -4 "$logs/gate-$topo/summary.md" | tail -3
    grep -h "^fused: \|fused path" "$logs/gate-$topo/summary.md" 2>/dev/null | head -3
    grep -hE "^\| fused \|" "$logs/gate-$topo/summary.md" 2>/dev/null | awk -F'|' '$7+0 > 0' | head -20
    grep -h "VERDICT\|REPRO" "$logs/gate-$topo.log" | head -6
  done
} >"$out/summary.txt" 2>&1
cat "$out/summary.txt"
tar -czf "$out/evidence.tar.gz" -C "$logs" . 2>/dev/null || echo "gpu_gate_evidence: the archive could not be written"
# the exit status is the steps': 0 only where every step ran and returned 0 (an rc the step did not leave is a failure)
failed=""
for name in verdicts gpumutants bytes gate-shared-gpu gate-multi-gpu; do
  [ "$(cat "$logs/$name.rc" 2>/dev/null)" = 0 ] || failed="$failed $name"
done
if [ -n "$failed" ]; then
  echo "gpu_gate_evidence: FAIL (rc not 0:$failed)"
  exit 1
fi
echo "gpu_gate_evidence: every step returned 0"
