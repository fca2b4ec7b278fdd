tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d7; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
PYTHONPATH=. timeout -k 5 90 python3 .kwt/check_memory.py > $D/memory.log 2>&1
echo "check_memory rc=$? at $(el) s" >> $D/steps.log; cat $D/memory.log >> $D/steps.log
R=$(sed 's/^python /python3 /' .kwt/repro.txt)
eval "timeout -k 5 120 $R" > $D/repro.log 2>&1
echo "repro (W=16 streams case, OOM before) rc=$? at $(el) s" >> $D/steps.log
tail -n 8 $D/repro.log >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=16 GEMM_RS_REPORT_DIR=$D/streams16 \
  timeout -k 5 $(( 380 - $(el) )) python3 -O -m pytest -q -p no:cacheprovider fuzz/test_gemm_rs.py -k "test_streams or test_graph_replay" > $D/streams16.log 2>&1
echo "pytest test_streams, test_graph_replay W=16 rc=$? at $(el) s" >> $D/steps.log
tail -n 3 $D/streams16.log >> $D/steps.log
python3 .kwt/count.py $D/streams16 >> $D/steps.log
cat $D/steps.log
