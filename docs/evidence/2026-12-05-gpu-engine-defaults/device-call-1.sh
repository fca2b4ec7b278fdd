# call 1 (30th session): the 28th/29th sessions' checks on the GPU for the first time -- ambient_state_kept
# (stream, CUDA generator items), the engine's tensor defaults (bf16 + torch.device("cuda:0") around the fused
# construction and eager calls), the checks no case made; the fused gate W = 2, 4, 8 and unfused W = 2, 4;
# the wrapper mutant FusedSideStreamLeftCurrent.
. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $D/steps.log
for spec in "fused 2,4,8 240" "unfused 2,4 70"; do
  set -- $spec; rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
  timeout -k 10 $(( $3 + 40 )) ./ci/gate --profile ci --impl $1 --topology shared-gpu --world-sizes $2 --time-limit $3 \
    --report-dir $D/gate-$1 > $D/gate-$1.log 2>&1
  echo "gate $1 W=$2 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  head -3 $D/gate-$1/summary.md | tail -1 | cut -c1-160 | tee -a $D/steps.log
  echo "ambient_state_kept rows: $(cat $D/gate-$1/*.jsonl 2>/dev/null | grep -c ambient_state_kept)  engine-default cases: $(cat $D/gate-$1/*.jsonl 2>/dev/null | grep -c 'engine defaults')" | tee -a $D/steps.log
  grep -A6 "Checks no case made" $D/gate-$1/summary.md | tee -a $D/steps.log || echo "every expected check made" | tee -a $D/steps.log
  grep -E "^(FAIL|HANG|CRASH|ERROR)|REPRO" $D/gate-$1/summary.md | head -12 | cut -c1-300 | tee -a $D/steps.log
done
s=$(date +%s)
timeout -k 5 150 python3 -O -m mutants.meta --gpu --optimize 1 --impl FusedSideStreamLeftCurrent > $D/kill-side-stream.txt 2>&1
echo "kill FusedSideStreamLeftCurrent rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -4 $D/kill-side-stream.txt | cut -c1-300 | tee -a $D/steps.log
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
