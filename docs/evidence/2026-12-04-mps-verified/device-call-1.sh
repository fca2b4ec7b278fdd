# call 1 (26th session): (a) MPS static SM partitions on this host? (b) the wrapper's MPS decline (a40394c) on the
# GPU: W = 1 instance facts + a W = 2 shared-gpu pytest run under a private MPS daemon (expect FAIL with the reason);
# (c) the fused gate W = 2, 4, 8 time-sliced (main since e8896f8's GPU run: a40394c, d9713ef);
# (d) GEMM core vs torch.mm at the four M >= 512 points below 1.0 (11th session), twice.
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv | tee -a $D/steps.log
# (a) static partitioning probe, private pipe folder
export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/mpsS-XXXX) CUDA_MPS_LOG_DIRECTORY=$D/mpsS-log
mkdir -p $CUDA_MPS_LOG_DIRECTORY
timeout 15 nvidia-cuda-mps-control -S -d; echo "mps -S -d rc=$?" | tee -a $D/steps.log
sleep 1; pgrep -fa nvidia-cuda-mps | tee -a $D/steps.log
for c in "lspart" "sm_partition help" "help"; do echo "> $c"; echo "$c" | timeout 10 nvidia-cuda-mps-control 2>&1 | head -30; done 2>&1 | tee -a $D/steps.log
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 2; pkill -f nvidia-cuda-mps; cat $CUDA_MPS_LOG_DIRECTORY/* 2>/dev/null | tail -20 > $D/mpsS-logs.txt
# (b) the decline under a plain private daemon
export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/mpsp-XXXX) CUDA_MPS_LOG_DIRECTORY=$D/mps-log
mkdir -p $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; echo "mps -d rc=$?" | tee -a $D/steps.log
timeout 120 python3 -O - <<'P' 2>&1 | tail -12 | tee -a $D/steps.log
import torch
from kernel.fused.wrapper import FusedGemmRs, device_facts
dev = torch.device("cuda", 0)
print("facts:", device_facts(dev))
impl = FusedGemmRs(max_M=512, N=7168, K=2048, device=dev)
w = torch.randn(7168, 2048, device=dev, dtype=torch.bfloat16)
print("main_path_support:", impl.main_path_support())
print("can_run:", impl.can_run(w))
x = torch.randn(512, 2048, device=dev, dtype=torch.bfloat16)
y = impl(x, w)
torch.cuda.synchronize()
print("last_path:", impl.last_path, "| equal to torch.mm:", bool(torch.equal(y, x @ w.T)))
try:
    FusedGemmRs(max_M=512, N=7168, K=2048, device=dev, force_fused=True)(x, w)
    print("forced: ran (WRONG)")
except Exception as e:
    print("forced:", type(e).__name__, str(e)[:160])
P
s=$(date +%s)
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=2 GEMM_RS_REPORT_DIR=$D/mpsw2 HYPOTHESIS_PROFILE=ci \
  PYTHONOPTIMIZE=1 timeout -k 5 150 python3 -m pytest -q -n 1 -p no:cacheprovider fuzz/test_gemm_rs.py \
  -k "test_compute or test_kernel_paths" > $D/mpsw2.log 2>&1
echo "W=2 under MPS rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -4 $D/mpsw2.log | cut -c1-300 | tee -a $D/steps.log
grep -m3 -o "main_path[^|]\{0,260\}" $D/mpsw2.log | tee -a $D/steps.log
echo quit | timeout 15 nvidia-cuda-mps-control; sleep 2; pkill -f nvidia-cuda-mps
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
# (c) the fused gate, time-sliced
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 230 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 200 \
  --report-dir $D/gate > $D/gate.log 2>&1
echo "gate rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -E "GEMM-RS gate|cases, [0-9]+ failed, [0-9.]+ s" $D/gate.log | tail -3 | cut -c1-260 | tee -a $D/steps.log
# (d) GEMM core, twice
for i in 1 2; do
  s=$(date +%s); timeout 150 python3 bench/bench_gemm.py --protocol pull --ms 512,2048,8192 --ns 7168,8192 --ks 2048,14336 > $D/bench-gemm-$i.txt 2>&1
  echo "bench $i rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
done
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
