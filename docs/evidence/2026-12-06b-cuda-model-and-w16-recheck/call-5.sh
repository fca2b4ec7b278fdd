tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d5; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
git log --oneline -1 >> $D/steps.log 2>/dev/null
PYTHONPATH=. timeout -k 5 120 python3 .kwt/check_memory.py > $D/memory.log 2>&1
echo "check_memory rc=$? at $(el) s" >> $D/steps.log; cat $D/memory.log >> $D/steps.log
R=$(sed 's/^python /python3 /' .kwt/repro.txt)
eval "timeout -k 5 150 $R" > $D/repro.log 2>&1
echo "repro (W=16 streams case, OOM before) rc=$? at $(el) s" >> $D/steps.log
tail -n 8 $D/repro.log >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 330 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 1,16 --time-limit 300 \
  --report-dir $D/gate-fused-w1-16 > $D/gate.log 2>&1
echo "gate fused W=1,16 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate-fused-w1-16 >> $D/steps.log
grep -h "cases\|VERDICT\|fused path\|W = \|W=" $D/gate-fused-w1-16/summary.md | head -20 >> $D/steps.log
cat $D/steps.log
