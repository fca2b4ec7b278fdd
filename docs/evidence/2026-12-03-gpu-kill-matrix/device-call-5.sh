# call 5 (22nd session): the nightly step as the pipelines run it -- ./ci/kill-matrix --gpu -- on a race build
# (FusedPushEarlySignal: may survive, listed) and an ordinary one (FusedDroppedPeer: must die), the control beside.
. .kwt/env.sh
D=/tmp/c5; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 250 ./ci/kill-matrix --gpu --jobs 3 --impl FusedPushEarlySignal,FusedDroppedPeer --report-dir $D/kill > $D/kill.log 2>&1
echo "ci/kill-matrix --gpu rc=$? at $(( $(date +%s) - t0 )) s" | tee $D/steps.log
grep -E "KILLED|SURVIVED|PASSED|ERROR|kill rate|RACE" $D/kill.log | cut -c1-300 | tee -a $D/steps.log
tar -czf "$OUT/c5.tgz" -C /tmp c5 2>/dev/null
