# call 4 (23rd session): MPS again, each rank limited to its share of the SMs (50 % at W = 2), (a) the group's
# device facts an MPS client reads, (b) the fused W = 2 compute and path tests without the clustered tiles (call 3
# died in the kernels' 60 s spin trap on a case whose first M may take 2-CTA clusters), (c) two cross-rank race
# builds of the push protocol under MPS -- ranks side by side instead of time-sliced.
. .kwt/env.sh
D=/tmp/c4; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache4
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; echo "mps daemon rc=$?" | tee $D/steps.log
timeout 90 python3 -c "
import torch
from kernel.fused.wrapper import device_facts
print('facts under mps 50%:', device_facts(torch.device('cuda', 0)))" 2>&1 | tail -2 | tee -a $D/steps.log
export PYTHONPATH=$GEMM_RS_ROOT/.kwt/probe:$PYTHONPATH MPS_PROBE_NO_CLUSTERS=1
timeout 60 python3 -c "import kernel.fused.wrapper as w; print('clusters patched:', w.CLUSTER_SIZES)" 2>&1 | tail -1 | tee -a $D/steps.log
s=$(date +%s)
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=2 GEMM_RS_REPORT_DIR=$D/r-mps GEMM_RS_CASE_DEADLINE=40 \
  timeout -k 5 110 env PYTHONOPTIMIZE=1 python3 -m pytest -n 1 fuzz/test_gemm_rs.py -k "test_compute or test_kernel_paths" -q -p no:cacheprovider > $D/pt-mps.log 2>&1
echo "pytest mps no-clusters rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log; tail -3 $D/pt-mps.log | cut -c1-300 | tee -a $D/steps.log
pkill -9 -f torchrun; pkill -9 -f rank_main; sleep 2
left=$(( 330 - $(el) ))
timeout -k 5 $left python3 -O -m mutants.meta --gpu --optimize 1 --jobs 1 --no-correct \
  --impl FusedPushEarlySignal,FusedPushConsumerFenceMissing --report-dir $D/kill > $D/kill.log 2>&1
echo "race builds under mps rc=$? (at $(el))" | tee -a $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|kill rate|^---|failed" $D/kill.log | cut -c1-300 | tee -a $D/steps.log
echo quit | nvidia-cuda-mps-control; sleep 1; cp -r /tmp/mps-log $D/ 2>/dev/null
tar -czf "$OUT/c4.tgz" -C /tmp c4 2>/dev/null
