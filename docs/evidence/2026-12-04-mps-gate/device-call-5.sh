# call 5 (25th session): `ci/gate --mps 1` re-made -- pools per GPU from the SMs a client at each share reports
# (fuzz/mps.py: client_sms, pools_that_fit) instead of shares summing to 100 %: the fused gate at W = 2, 4, 8,
# then at the default world sizes (W = 1 .. 16) until the call's time is spent (--time-limit: a summary either way).
. .kwt/env.sh
D=/tmp/c5; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
gate() {  # label limit extra-args...
  local label=$1 lim=$2; shift 2; rm -rf /tmp/gemm-rs-pool-*; local s=$(date +%s)
  timeout -k 10 $(( lim + 30 )) ./ci/gate --profile ci --impl fused --topology shared-gpu --time-limit $lim "$@" \
    --report-dir $D/gate-$label > $D/gate-$label.log 2>&1
  echo "gate $label rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "MPS|GEMM-RS gate|cases, [0-9]+ failed, [0-9.]+ s" $D/gate-$label.log | tail -4 | cut -c1-260 | tee -a $D/steps.log
  grep -h -E "^- (failed|error|hang|died)" $D/gate-$label/*.md 2>/dev/null | head -5 | cut -c1-300 | tee -a $D/steps.log
  pgrep -fa nvidia-cuda-mps | tee -a $D/steps.log
}
gate mps-w248 170 --world-sizes 2,4,8 --mps 1
left=$(( 330 - $(el) ))
gate mps-default $left --mps 1
tar -czf "$OUT/c5.tgz" -C /tmp c5 2>/dev/null
