tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d8; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
timeout -k 5 150 python3 -O -m pytest -q -p no:cacheprovider fuzz/test_gemm_rs.py --impl fused --topology shared-gpu -k W16 -rs > $D/w16.log 2>&1
echo "pytest fuzz/ -k W16 (default world sizes, 80 GB card) rc=$? at $(el) s" >> $D/steps.log
tail -n 6 $D/w16.log >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
timeout -k 5 200 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4 --time-limit 150 --report-dir $D/gate > $D/gate.log 2>&1
echo "gate fused W=2,4 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate >> $D/steps.log; grep -h "VERDICT\|cases," $D/gate/summary.md | head -3 >> $D/steps.log
cat $D/steps.log
