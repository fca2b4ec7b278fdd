# call 6 (27th session): bench_gemm_rs.py's interleaved columns (multi-gpu path) at W = 1, NCCL, one H200 -- a smoke
# run of the code path the 2xH200 runs take (cross-rank ratios are not the point here)
. .kwt/env.sh
D=/tmp/c6; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s)
timeout -k 10 300 torchrun --nproc-per-node 1 bench/bench_gemm_rs.py --ms 512,2048 --shapes 7168x2048 --no-asynctp \
  --experiment-shapes '' --samples 20 > $D/bench-rs-w1.txt 2>&1
echo "bench_gemm_rs W=1 rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
tail -30 $D/bench-rs-w1.txt
tar -czf "$OUT/c6.tgz" -C /tmp c6 2>/dev/null
