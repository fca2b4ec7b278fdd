# call 2 (26th session): (a) the gate's MPS annotation (95646ee) under a private MPS daemon -- fused and unfused,
# W = 2, smoke: fused FAILs (its path declines MPS) with each failure's note naming the MPS-client ranks and the
# summary's warning; (b) the literal release-gate command at HEAD, no MPS (records: rank_mps false on GPU ranks).
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/mpsp-XXXX) CUDA_MPS_LOG_DIRECTORY=$D/mps-log
mkdir -p $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d; echo "mps -d rc=$?" | tee -a $D/steps.log
s=$(date +%s)
timeout -k 10 110 ./ci/gate --profile smoke --impl fused,unfused --topology shared-gpu --world-sizes 2 --time-limit 80 \
  --report-dir $D/gate-mps > $D/gate-mps.log 2>&1
echo "gate under MPS rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -8 $D/gate-mps/summary.md | cut -c1-400 | tee -a $D/steps.log
grep -c "ran as MPS clients" $D/gate-mps/summary.md | sed 's/^/failure notes naming MPS ranks: /' | tee -a $D/steps.log
echo quit | timeout 15 nvidia-cuda-mps-control; sleep 2; pkill -f nvidia-cuda-mps
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
s=$(date +%s)
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 400 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -v -e Benchmark -e warner $D/literal.log | tail -6 | cut -c1-300 | tee -a $D/steps.log
cat $D/literal/cases-*.jsonl | python3 -c "
import sys, json, collections
c = collections.Counter((r['impl'], r['topology'], r['status'], json.dumps(sorted(set(r.get('rank_mps', {}).values()), key=str))) for r in map(json.loads, sys.stdin))
for k, v in sorted(c.items()): print(v, *k)" | tee -a $D/steps.log
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
