# call 1 (20th session): GPU time-slice probe; test_counter_wrap on push and auto; gate pools-per-gpu sweep.
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi -L; nproc; python3 -c "import cutlass; print('cutlass ok')"; } > $D/host.log 2>&1
timeout -k 5 90 python3 .kwt/slice_probe.py 0 1 3 7 15 > $D/slice.log 2>&1
echo "slice rc=$? (at $(el))" | tee -a $D/steps.log; cat $D/slice.log | tee -a $D/steps.log
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
wrap() {  # name impl world-sizes limit
  rm -rf /tmp/gemm-rs-pool-*
  s=$(date +%s)
  GEMM_RS_IMPL=$2 GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=$3 GEMM_RS_REPORT_DIR=$D/r-$1 timeout -k 5 $4 \
    env PYTHONOPTIMIZE=1 python3 -m pytest -n 3 fuzz/test_gemm_rs.py -k test_counter_wrap -q -p no:cacheprovider -rs > $D/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  tail -3 $D/$1.log | tee -a $D/steps.log
}
wrap push kernel.fused:FusedGemmRsPush 2,4,8 110
wrap auto tests.kernel.protocol_impls:AutoAlternatingOnSharedGpu 2,4 90
gate() {  # pools
  left=$(( 585 - $(el) ))
  [ $left -gt 95 ] || { echo "gate p$1 not run (at $(el))" | tee -a $D/steps.log; return; }
  rm -rf /tmp/gemm-rs-pool-*
  s=$(date +%s)
  timeout -k 5 $left env PYTHONOPTIMIZE=1 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --pools-per-gpu $1 --report-dir $D/gate-p$1 > $D/gate-p$1.log 2>&1
  echo "gate pools=$1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "VERDICT|cases, " $D/gate-p$1.log | tail -2 | tee -a $D/steps.log
}
gate 4
gate 3
gate 2
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
cat $D/steps.log
