# call 4 (25th session, main = e8896f8's code): is the W = 8 trap under MPS the share scheme's or the kernel's?
# The W = 8 test_compute case that died under `ci/gate --mps 1` (4 pools, shares 12/6/3 %; its REPRO with the pool's
# 32-case history) replayed on one pool alone as MPS clients at 12 % and at 6 % per rank (8 ranks: 96 / 48 % of
# the SMs; no other client), then time-sliced (no MPS); then W = 8 test_compute cases at 12 % per rank, one pool.
. .kwt/env.sh
D=/tmp/c4; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
CASE=$(cat .kwt/case-w8.json); HIST=$(cat .kwt/hist-w8.txt)
export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/mpsp-XXXX) CUDA_MPS_LOG_DIRECTORY=$D/mps-log
mkdir -p $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; echo "mps daemon rc=$?" | tee -a $D/steps.log
for pct in 12 3; do
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 60 python3 -c "
import torch
from kernel.fused.wrapper import device_facts
print('facts at $pct %:', device_facts(torch.device('cuda', 0)))" 2>&1 | tail -1 | tee -a $D/steps.log
done
replay() {  # label limit
  local s=$(date +%s)
  timeout -k 5 $2 python3 -O -m fuzz.repro --impl fused --topology shared-gpu --world-sizes 8 --case "$CASE" \
    --history "$HIST" > $D/$1.log 2>&1
  echo "replay $1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "^verdict|status|died|trap|unspecified launch" $D/$1.log | head -4 | cut -c1-200 | tee -a $D/steps.log
}
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12 replay mps12 130
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=6 replay mps6 130
echo quit | timeout 15 nvidia-cuda-mps-control; sleep 2
MPSDIR=$CUDA_MPS_PIPE_DIRECTORY; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
replay timesliced 90
export CUDA_MPS_PIPE_DIRECTORY=$MPSDIR CUDA_MPS_LOG_DIRECTORY=$D/mps-log2; mkdir -p $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
left=$(( 555 - $(el) )); s=$(date +%s)
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12 GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=8 \
  GEMM_RS_REPORT_DIR=$D/w8 HYPOTHESIS_PROFILE=ci PYTHONOPTIMIZE=1 timeout -k 5 $left python3 -m pytest -q -n 1 \
  -p no:cacheprovider fuzz/test_gemm_rs.py -k "test_compute or test_kernel_paths" > $D/w8.log 2>&1
echo "W=8 compute+paths at 12 % rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -3 $D/w8.log | cut -c1-200 | tee -a $D/steps.log
cat $D/w8/cases-*.jsonl 2>/dev/null | python3 -c "
import sys, json, collections
c = collections.Counter(json.loads(l)['status'] for l in sys.stdin)
print('W=8 case records by status:', dict(c))" | tee -a $D/steps.log
echo quit | timeout 15 nvidia-cuda-mps-control
tar -czf "$OUT/c4.tgz" -C /tmp c4 2>/dev/null
