# Prepared in the 28th session (no device lent), for the next session that has one: the GPU side of
# ambient_state_kept and of the autograd-mode rotation -- the stream / CUDA-generator items, the wrapper mutant
# FusedSideStreamLeftCurrent, and the fused kernel through the gate with both. Run from the project root with
# docs/evidence/2026-12-04-host-time/device-env.sh as .kwt/env.sh, the bundle in .device/, carry [".device"]
# (the tree without docs/, tests/ but tests/scheduling.py and tests/foundation/test_ambient_state.py's helpers).
. .kwt/env.sh
D=/tmp/n1; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); rm -rf /tmp/gemm-rs-pool-*
timeout -k 5 300 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 280 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate ci fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-100 >> $D/steps.txt
grep -c '"ambient_state_kept"' $D/gate-fused/*.jsonl 2>/dev/null | tail -1 >> $D/steps.txt
# (29th session) the checks no case made: on shared-gpu every name of fuzz/expected_checks.py is expected
grep -A3 "Checks no case made" $D/gate-fused/summary.md >> $D/steps.txt || echo "every expected check made" >> $D/steps.txt
s=$(date +%s)
timeout -k 5 240 python3 -O -m mutants.meta --gpu --optimize 1 --impl FusedSideStreamLeftCurrent \
  > $D/kill-side-stream-left-current.txt 2>&1
echo "kill FusedSideStreamLeftCurrent rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
tail -3 $D/kill-side-stream-left-current.txt >> $D/steps.txt
tar -czf "$OUT/n1.tgz" -C /tmp n1 2>/dev/null
cat $D/steps.txt
