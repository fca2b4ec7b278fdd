# call 6 (32nd session, the same warm GPU): the fused gate at the session's last code (the lone bad call in it).
. .kwt/env.sh; D=/tmp/d6; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 200 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 180 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -E "^- failed|FAIL" $D/gate-fused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
cp $D/gate-fused/summary.md $D/summary.md
tar -czf "$OUT/d6.tgz" -C /tmp d6/steps.log d6/summary.md d6/gate-fused.log 2>/dev/null
