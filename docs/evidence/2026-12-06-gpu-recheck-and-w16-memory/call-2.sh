tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $D/steps.log
timeout -k 10 470 ./ci/kill-matrix --gpu --jobs 4 --report-dir $D/km > $D/kill.log 2>&1
echo "kill-matrix rc=$? at $(el) s" >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
L=$(( 555 - $(el) - 15 )); [ $L -gt 60 ] && L=60
[ $L -gt 20 ] && { timeout -k 5 $(( L + 10 )) ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit $L \
  --report-dir $D/gate-unfused > $D/gate-unfused.log 2>&1; echo "gate unfused W=2,4 rc=$? at $(el) s" >> $D/steps.log
  python3 .kwt/count.py $D/gate-unfused >> $D/steps.log; }
tail -n 45 $D/kill.log >> $D/steps.log
cat $D/steps.log
