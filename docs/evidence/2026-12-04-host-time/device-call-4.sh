# call 4 (27th session): host time step by step (host_time3.py); the fused and unfused gates on the changed checks
. .kwt/env.sh
D=/tmp/c4; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); timeout 150 python3 .kwt/host_time3.py > $D/host.txt 2>&1; echo "host rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
for spec in "fused 2,4,8 200" "unfused 2,4 100"; do
  set -- $spec; rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
  timeout -k 10 $(( $3 + 30 )) ./ci/gate --profile ci --impl $1 --topology shared-gpu --world-sizes $2 --time-limit $3 \
    --report-dir $D/gate-$1 > $D/gate-$1.log 2>&1
  echo "gate $1 W=$2 rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
  head -3 $D/gate-$1/summary.md | tail -1 | cut -c1-100 >> $D/steps.txt
done
tar -czf "$OUT/c4.tgz" -C /tmp c4 2>/dev/null
cat $D/steps.txt; cat $D/host.txt
