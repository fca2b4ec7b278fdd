# call 2 (22nd session): the two regressions of call 1 after their fixes -- FusedBf16Parts (test_kernel_paths calls
# each path's own M on the cancel kind) and FusedGlobalRankAtLaunch (a GPU fault after the calls is device_fault,
# not a harness ERROR), FusedDroppedPart beside them, with the controls; then the fused gate W = 2, 4, 8.
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 260 python3 -O -m mutants.meta --gpu --optimize 1 --jobs 3 \
  --impl FusedBf16Parts,FusedGlobalRankAtLaunch,FusedDroppedPart --report-dir $D/kill > $D/kill.log 2>&1
echo "kill rc=$? at $(el) s" | tee $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|FAILED|PASSED|kill rate|MISMATCH" $D/kill.log | cut -c1-260 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
s=$(date +%s)
left=$(( 545 - $(el) ))
timeout -k 5 $left env PYTHONOPTIMIZE=1 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -E "VERDICT|cases, " $D/gate-fused.log | tail -2 | cut -c1-200 | tee -a $D/steps.log
grep -h -E "^- (failed|error|hang|died)" $D/gate-fused/*.md 2>/dev/null | head -5 | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
cat $D/steps.log
