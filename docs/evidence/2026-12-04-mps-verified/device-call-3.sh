# call 3 (26th session): the nightly GPU kill matrix at HEAD (95646ee: mps_client moved to kernel.checks, the
# ranks' MPS answers in hello and results) -- every wrapper mutant and fault build must still die, the correct
# kernel pass beside them.
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
git log --oneline -1 2>/dev/null | tee -a $D/steps.log
s=$(date +%s)
timeout -k 10 500 ./ci/kill-matrix --gpu --jobs 4 > $D/kill.log 2>&1
echo "ci/kill-matrix --gpu --jobs 4 rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
grep -E "PASSED|SURVIVED|KILLED|ERROR|kill rate|^RACE" $D/kill.log | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
