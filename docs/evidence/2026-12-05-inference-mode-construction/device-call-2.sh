# call 2 (31st session, one GPU): the literal release-gate command to its end (the 30th session cut it at 375 s,
# 96 %), with this session's changes.
. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/d2; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 560 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? (at $(el) s)" | tee -a $D/steps.log
tail -3 $D/literal.log | cut -c1-250 | tee -a $D/steps.log
ls $D/literal | head; head -3 $D/literal/summary.md 2>/dev/null | tail -1 | cut -c1-250 | tee -a $D/steps.log
grep -A6 "Checks no case made" $D/literal/summary.md | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/d2.tgz" -C /tmp d2 2>/dev/null
