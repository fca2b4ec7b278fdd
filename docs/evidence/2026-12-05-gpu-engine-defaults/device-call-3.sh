. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 370 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -4 $D/literal.log | cut -c1-200 | tee -a $D/steps.log
head -3 $D/literal/summary.md 2>/dev/null | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -A4 "Checks no case made" $D/literal/summary.md | cut -c1-400 | tee -a $D/steps.log
grep -E "^- failed" $D/literal/summary.md | head -5 | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
