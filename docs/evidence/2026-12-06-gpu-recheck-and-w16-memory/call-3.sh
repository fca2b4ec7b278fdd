tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d3; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 330 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 1,16 --time-limit 300 \
  --report-dir $D/gate-fused-w1-16 > $D/gate.log 2>&1
echo "gate fused W=1,16 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate-fused-w1-16 >> $D/steps.log
grep -h "cases\|VERDICT\|fused path\|W = \|W=" $D/gate-fused-w1-16/summary.md | head -20 >> $D/steps.log
cat $D/steps.log
