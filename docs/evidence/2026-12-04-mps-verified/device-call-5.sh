# call 5 (26th session): fresh results fill only their padding rows (3cd54b2) -- what a call without out= saves
# (W = 1 fused GEMM, graphs), then the fused gate W = 2, 4, 8 and the unfused shared-gpu gate W = 2, 4 on it.
. .kwt/env.sh
D=/tmp/c5; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout 150 python3 .kwt/fresh_time.py 2>&1 | grep -v -i warn | tee -a $D/steps.log
for spec in "fused 2,4,8 200" "unfused 2,4 100"; do
  set -- $spec; rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
  timeout -k 10 $(( $3 + 30 )) ./ci/gate --profile ci --impl $1 --topology shared-gpu --world-sizes $2 --time-limit $3 \
    --report-dir $D/gate-$1 > $D/gate-$1.log 2>&1
  echo "gate $1 W=$2 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  head -3 $D/gate-$1/summary.md | tail -1 | cut -c1-120 | tee -a $D/steps.log
  grep -E "fresh_padding_zero|fresh_result " $D/gate-$1/summary.md | head -4 | tee -a $D/steps.log
done
tar -czf "$OUT/c5.tgz" -C /tmp c5 2>/dev/null
