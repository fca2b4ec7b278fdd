# call 7 (27th session): the literal release-gate command at HEAD (9f7d882: the new launch path), no MPS
. .kwt/env.sh
D=/tmp/c7; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 480 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
tail -4 $D/literal.log | cut -c1-200 | tee -a $D/steps.log
head -3 $D/literal/summary.md 2>/dev/null | tail -1 | cut -c1-200 | tee -a $D/steps.log
tar -czf "$OUT/c7.tgz" -C /tmp c7 2>/dev/null
