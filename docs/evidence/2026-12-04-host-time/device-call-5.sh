# call 5 (27th session): the nightly GPU kill matrix on the new launch path (kept marshalling, raw stream, one-read
# checks) -- every wrapper mutant and fault build must still die, the correct kernel pass beside them
. .kwt/env.sh
D=/tmp/c5; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s)
timeout -k 10 500 ./ci/kill-matrix --gpu --jobs 4 > $D/kill.log 2>&1
echo "ci/kill-matrix --gpu --jobs 4 rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
grep -E "PASSED|SURVIVED|KILLED|ERROR|kill rate|^RACE" $D/kill.log | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/c5.tgz" -C /tmp c5 2>/dev/null
