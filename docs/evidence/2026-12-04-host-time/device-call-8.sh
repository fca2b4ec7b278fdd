# call 8 (27th session): the stream argument bound at compile (no import per call) -- host time, results, a smoke gate
. .kwt/env.sh
D=/tmp/c8; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); timeout 60 python3 .kwt/host_time4.py > $D/host.txt 2>&1; echo "host rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 5 100 ./ci/gate --profile smoke --impl fused --topology shared-gpu --world-sizes 2 --time-limit 80 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate smoke fused W=2 rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-100 >> $D/steps.txt
tar -czf "$OUT/c8.tgz" -C /tmp c8 2>/dev/null
cat $D/steps.txt $D/host.txt
