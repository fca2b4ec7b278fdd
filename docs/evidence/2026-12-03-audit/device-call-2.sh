# call 2 (20th session): the audit's checks on the GPU -- fused gate W = 2, 4, 8 (shard boundaries, bad calls at
# 2W + 1, capacity with no work and no collective, NaN weights and zero rows); W = 1, 16 of the fixed/bad tests;
# unfused on shared-gpu.
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi -L; nproc; python3 -c "import cutlass; print('cutlass ok')"; } > $D/host.log 2>&1
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
gate() {  # name impl world-sizes limit
  rm -rf /tmp/gemm-rs-pool-*
  s=$(date +%s)
  timeout -k 5 $4 env PYTHONOPTIMIZE=1 ./ci/gate --profile ci --impl $2 --topology shared-gpu --world-sizes $3 --report-dir $D/gate-$1 > $D/gate-$1.log 2>&1
  echo "gate $1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "VERDICT|cases, " $D/gate-$1.log | tail -2 | cut -c1-200 | tee -a $D/steps.log
}
gate fused fused 2,4,8 170
rm -rf /tmp/gemm-rs-pool-*
s=$(date +%s)
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=1,16 GEMM_RS_REPORT_DIR=$D/r-w1-16 timeout -k 5 200 \
  env PYTHONOPTIMIZE=1 python3 -m pytest -n 2 fuzz/test_gemm_rs.py -k "test_shard_boundaries or test_bad_call or test_capacity" -q -p no:cacheprovider -rs > $D/w1-16.log 2>&1
echo "w1-16 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -3 $D/w1-16.log | tee -a $D/steps.log
left=$(( 570 - $(el) ))
[ $left -gt 60 ] && gate unfused unfused 2,4 $left
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
grep -h -E "^E .*(FAILED|\[)|FAILED" $D/*.log | head -20
cat $D/steps.log
