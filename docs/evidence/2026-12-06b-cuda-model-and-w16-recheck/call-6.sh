tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d6; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $D/steps.log
timeout -k 10 420 ./ci/kill-matrix --gpu --jobs 4 --report-dir $D/km > $D/kill.log 2>&1
echo "kill-matrix rc=$? at $(el) s" >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
L=$(( 575 - $(el) - 20 )); [ $L -gt 150 ] && L=150
[ $L -gt 40 ] && { timeout -k 5 $(( L + 15 )) ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit $L \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1; echo "gate fused W=2,4,8 rc=$? at $(el) s" >> $D/steps.log
  python3 .kwt/count.py $D/gate-fused >> $D/steps.log; grep -h "VERDICT\|cases," $D/gate-fused/summary.md | head -3 >> $D/steps.log; }
tail -n 48 $D/kill.log >> $D/steps.log
cat $D/steps.log
