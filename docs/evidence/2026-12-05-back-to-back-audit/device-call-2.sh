# call 2 (32nd session, the same warm H200): the whole GPU kill matrix with the new write-after-read build.
. .kwt/env.sh; D=/tmp/d2; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 570 ./ci/kill-matrix --gpu --jobs 4 > $D/kill-matrix-gpu.log 2>&1
echo "kill-matrix --gpu rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
grep -E "kill rate|SURVIVED|RACE|FAILED|control|ERROR" $D/kill-matrix-gpu.log | head -24 | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/d2.tgz" -C /tmp d2 2>/dev/null
