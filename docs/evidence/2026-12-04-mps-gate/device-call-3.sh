# call 3 (25th session, main at f30a583: the MPS mode reverted): the nightly GPU kill matrix as the pipelines run it
# (every fault build and wrapper mutant, FusedLyingFallback among them, --jobs 4, default mode: ranks time-slicing
# the GPU), then the fused gate W = 2, 4, 8.
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
git log --oneline -1 > $D/steps.log 2>&1 || echo "(no git on the device copy)" >> $D/steps.log
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 370 ./ci/kill-matrix --gpu --jobs 4 --report-dir $D/kill > $D/kill.log 2>&1
echo "ci/kill-matrix --gpu --jobs 4 rc=$? (at $(el))" | tee -a $D/steps.log
grep -E "kill rate|^RACE|PASSED|ERROR|SURVIVED" $D/kill.log | grep -v "^\[" | cut -c1-220 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s); left=$(( 575 - $(el) ))
timeout -k 5 $left ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 \
  --report-dir $D/gate > $D/gate.log 2>&1
echo "gate fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -E "GEMM-RS gate|cases, 0 failed|cases, [0-9]+ failed" $D/gate.log | tail -3 | cut -c1-220 | tee -a $D/steps.log
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
