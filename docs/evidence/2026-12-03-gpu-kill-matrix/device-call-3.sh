# call 3 (22nd session): FusedGlobalRankAtLaunch's ERROR -- its repro line with every rank's full report, then the
# kill session again (the matrix now shows what the ranks raised).
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 200 bash -c "$(cat .kwt/repro.txt) --case-deadline 90" > $D/repro.log 2>&1
echo "repro rc=$? at $(( $(date +%s) - t0 )) s" | tee $D/steps.log
timeout -k 5 200 python3 -O -m mutants.meta --gpu --optimize 1 --no-correct --impl FusedGlobalRankAtLaunch \
  --report-dir $D/kill > $D/kill.log 2>&1
echo "kill rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|harness" $D/kill.log | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
grep -v "^\s*$" $D/repro.log | cut -c1-300 | head -120
