# call 3 (27th session): the kept DSL marshalling -- host time, results, the fused gate on it
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); timeout 150 python3 .kwt/host_time2.py > $D/host.txt 2>&1; echo "host rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 230 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 200 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-160 >> $D/steps.txt
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
cat $D/steps.txt; head -4 $D/host.txt; grep -E "bitwise|current_stream" $D/host.txt
