# call 3 (23rd session): can ranks sharing one GPU run side by side (MPS) instead of time-slicing? Time slicing runs
# one rank's kernel at a time, so the cross-rank race builds survive on one GPU. Probe: the SM count an MPS client
# sees, the fused W = 2 path test with and without MPS, then the cross-rank race builds under MPS. Private pipe dir;
# the daemon quits at the end.
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache3
which nvidia-cuda-mps-control > $D/steps.log 2>&1 || echo "no mps control binary" >> $D/steps.log
pt() {  # label
  s=$(date +%s)
  GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=2 GEMM_RS_REPORT_DIR=$D/r-$1 timeout -k 5 ${2:-150} \
    env PYTHONOPTIMIZE=1 python3 -m pytest -n 1 fuzz/test_gemm_rs.py -k "test_kernel_paths or test_compute" -q -p no:cacheprovider > $D/pt-$1.log 2>&1
  echo "pytest $1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log; tail -2 $D/pt-$1.log | cut -c1-300 | tee -a $D/steps.log
}
pt plain
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d >> $D/steps.log 2>&1; echo "mps daemon rc=$?" | tee -a $D/steps.log
for pct in 100 50 25; do CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct timeout 60 python3 .kwt/mps_probe.py 2>&1 | tail -3 | tee -a $D/steps.log; done
export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
pt mps 150
timeout -k 5 200 python3 -O -m mutants.meta --gpu --optimize 1 --jobs 3 --no-correct \
  --impl FusedPushEarlySignal,FusedPushConsumerFenceMissing,FusedEpochOrderSigned --report-dir $D/kill > $D/kill.log 2>&1
echo "race builds under mps rc=$? (at $(el))" | tee -a $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|kill rate" $D/kill.log | cut -c1-250 | tee -a $D/steps.log
echo quit | nvidia-cuda-mps-control; cp -r /tmp/mps-log $D/ 2>/dev/null
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
cat $D/steps.log
