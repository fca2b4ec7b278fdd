tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d13; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
timeout -k 10 570 ./ci/kill-matrix --gpu --jobs 5 --report-dir $D/km > $D/km.log 2>&1
echo "kill-matrix --gpu --jobs 5 rc=$? at $(el) s" >> $D/steps.log
tail -n 60 $D/km.log >> $D/steps.log
cat $D/steps.log
