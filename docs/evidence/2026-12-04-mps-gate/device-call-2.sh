# call 2 (25th session, code 6f2191c): (a) the fused gate W = 2, 4, 8 with --mps 1 (rc 0: the server quits cleanly?),
# (b) wrapper and kernel fault builds through the gate's sessions under an MPS server (a private daemon, the
# ranks' share from _GEMM_RS_MPS / GEMM_RS_POOLS_PER_GPU=1, one session at a time): do MPS-mode verdicts kill?,
# (c) the fused gate at its default world sizes (W = 1..16) with --mps 1, against 207 s in the default mode.
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
gate() {  # label limit extra-args...
  local label=$1 lim=$2; shift 2; rm -rf /tmp/gemm-rs-pool-*; local s=$(date +%s)
  timeout -k 5 $lim ./ci/gate --profile ci --impl fused --topology shared-gpu "$@" \
    --report-dir $D/gate-$label > $D/gate-$label.log 2>&1
  echo "gate $label rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "VERDICT|cases, |MPS|GEMM-RS gate" $D/gate-$label.log | tail -4 | cut -c1-220 | tee -a $D/steps.log
  grep -h -E "^- (failed|error|hang|died)" $D/gate-$label/*.md 2>/dev/null | head -5 | cut -c1-400 | tee -a $D/steps.log
}
gate mps-w248 170 --world-sizes 2,4,8 --mps 1
pgrep -fa nvidia-cuda-mps 2>&1 | tee -a $D/steps.log; echo "(mps daemons left after gate: above)" | tee -a $D/steps.log
# (b) kill sessions under a private MPS daemon
export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/mpsp-XXXX) CUDA_MPS_LOG_DIRECTORY=$D/kill-mps-log _GEMM_RS_MPS=1 GEMM_RS_POOLS_PER_GPU=1
mkdir -p $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; echo "mps daemon rc=$?" | tee -a $D/steps.log
timeout -k 5 200 python3 -O -m mutants.meta --gpu --optimize 1 --jobs 1 \
  --impl FusedDroppedPeer,FusedStaleEpoch,FusedWritePastCapacity,FusedPaddingWritten,FusedEpochBakedAtCapture,FusedCallerDoesNotWait,FusedLyingFallback \
  --report-dir $D/kill > $D/kill.log 2>&1
echo "kill under mps rc=$? (at $(el))" | tee -a $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|PASSED|kill rate" $D/kill.log | cut -c1-200 | tee -a $D/steps.log
echo quit | timeout 15 nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY _GEMM_RS_MPS GEMM_RS_POOLS_PER_GPU
left=$(( 560 - $(el) ))
gate mps-default $left --mps 1
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
