tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d12; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
git log --oneline -1 >> $D/steps.log 2>/dev/null
timeout -k 10 300 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 280 --report-dir $D/fused > $D/fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/fused >> $D/steps.log; grep -h "VERDICT\|cases," $D/fused/summary.md | head -3 >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 200 ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit 180 --report-dir $D/unfused > $D/unfused.log 2>&1
echo "gate unfused W=2,4 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/unfused >> $D/steps.log; grep -h "VERDICT\|cases," $D/unfused/summary.md | head -3 >> $D/steps.log
cat $D/steps.log
