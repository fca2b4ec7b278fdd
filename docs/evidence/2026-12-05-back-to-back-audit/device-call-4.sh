# call 4 (32nd session, the same warm GPU): the literal release-gate command with this session's changes.
. .kwt/env.sh; D=/tmp/d4; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 550 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
tail -3 $D/literal.log | cut -c1-250 | tee -a $D/steps.log
# (then a count of the cases' statuses, the checks of calls made back to back and every failed check)
tar -czf "$OUT/d4.tgz" -C /tmp d4 2>/dev/null
