# call 3 (31st session, the same warm H200): the sanitizers over every declared kernel path at the session's HEAD
# (last run at the 15th session), both at once.
. .kwt/env.sh; D=/tmp/d3; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
(timeout -k 5 250 python3 -O -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 1,2 --tool racecheck \
  --paths all --paths-only --calls-only > $D/racecheck.log 2>&1; echo "racecheck rc=$? $(( $(date +%s) - s )) s" >> $D/steps.log) &
(timeout -k 5 250 python3 -O -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 1,2,4,8 --tool memcheck \
  --paths all --paths-only --calls-only > $D/memcheck.log 2>&1; echo "memcheck rc=$? $(( $(date +%s) - s )) s" >> $D/steps.log) &
wait; cat $D/steps.log; tar -czf $OUT/d3.tgz -C /tmp d3
