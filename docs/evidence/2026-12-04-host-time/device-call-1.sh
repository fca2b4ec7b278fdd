# call 1 (27th session): the GEMM-core points timed interleaved (bench/_timing.py), clocks and power logged; ncu of
# ours and cuBLAS's kernel at the three points below 1.0 (clocks locked to base)
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $D/smi.csv 2>&1 &
SMI=$!
T0=$(date +%s)
for r in 1 2; do
  s=$(date +%s); timeout 200 python3 bench/bench_gemm.py --protocol pull --ms 512,2048,8192 --ns 7168,8192 --ks 2048,14336 > $D/bench$r.txt 2>&1
  echo "bench $r rc=$? $(( $(date +%s) - s )) s (at $(( s - T0 )))" >> $D/steps.txt
done
kill $SMI
for shape in "512 7168 2048" "2048 7168 14336" "8192 7168 14336"; do
  tag=$(echo $shape | tr ' ' x)
  s=$(date +%s)
  timeout 150 ncu --profile-from-start off --clock-control base --set full python3 .kwt/ncu_probe.py $shape > $D/ncu-$tag.txt 2>&1
  echo "ncu $tag rc=$? $(( $(date +%s) - s )) s" >> $D/steps.txt
done
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
cat $D/steps.txt; tail -3 $D/bench1.txt
