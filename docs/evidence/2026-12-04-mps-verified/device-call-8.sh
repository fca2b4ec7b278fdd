# call 8 (26th session): the launch arguments kept by value (compile.py _ptr/_i32 caches): host time of an eager
# call with and without them, then the fused gate W = 2, 4, 8 on them.
. .kwt/env.sh
D=/tmp/c8; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout 90 python3 .kwt/host_time.py 2>&1 | grep -v -i warn | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 200 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 170 \
  --report-dir $D/gate > $D/gate.log 2>&1
echo "gate rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate/summary.md | tail -1 | cut -c1-100 | tee -a $D/steps.log
tar -czf "$OUT/c8.tgz" -C /tmp c8 2>/dev/null
