tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $D/steps.log
(timeout -k 5 170 python3 -O -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 1,2 --tool racecheck \
  --paths all --paths-only --calls-only > $D/racecheck.log 2>&1; echo "racecheck rc=$? at $(el) s" >> $D/steps.log) &
(timeout -k 5 170 python3 -O -m fuzz.sanitize --impl fused --topology shared-gpu --world-sizes 1,2,4,8 --tool memcheck \
  --paths all --paths-only --calls-only > $D/memcheck.log 2>&1; echo "memcheck rc=$? at $(el) s" >> $D/steps.log) &
wait
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 150 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 130 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate-fused >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
L=$(( 550 - $(el) ))
timeout -k 5 $L ./ci/kill-matrix --gpu --jobs 4 --impl FusedDroppedPeer,FusedStaleEpoch,FusedWritePastCapacity \
  --report-dir $D/km > $D/kill.log 2>&1
echo "kill-matrix subset rc=$? at $(el) s (limit $L)" >> $D/steps.log
tail -4 $D/racecheck.log $D/memcheck.log $D/gate-fused.log >> $D/steps.log
tail -12 $D/kill.log >> $D/steps.log
cat $D/steps.log
