tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d11; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
timeout -k 10 170 python3 -O -m mutants.meta --gpu --optimize 1 --no-correct --jobs 1 --impl FusedWorkspaceSharedAcrossGroups --report-dir $D/km > $D/km.log 2>&1
echo "kill matrix FusedWorkspaceSharedAcrossGroups rc=$? at $(el) s" >> $D/steps.log
tail -n 6 $D/km.log >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 400 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 1,16 --time-limit 380 --report-dir $D/gate > $D/gate.log 2>&1
echo "gate fused W=1,16 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate >> $D/steps.log; grep -h "VERDICT\|cases,\|skipped\|ERROR" $D/gate/summary.md | head -12 >> $D/steps.log
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> $D/steps.log
cat $D/steps.log
