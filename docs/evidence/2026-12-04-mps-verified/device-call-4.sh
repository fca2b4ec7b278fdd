# call 4 (26th session): which cuBLAS kernels torch.mm runs at the GEMM-core points below 1.0 (torch profiler)
. .kwt/env.sh
D=/tmp/c4; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout 240 python3 .kwt/prof.py > $D/prof.txt 2>&1; echo "prof rc=$?" >> $D/prof.txt
tar -czf "$OUT/c4.tgz" -C /tmp c4 2>/dev/null
