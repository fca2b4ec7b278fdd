# call 6 (26th session): call 5's timing again, its result check bitwise (fresh vs out= vs torch.mm): call 5's
# "< 1.0 absolute" check was too tight for K = 14336 (|y| up to ~700, a bf16 ulp of 4 there)
. .kwt/env.sh
D=/tmp/c6; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout 150 python3 .kwt/fresh_time.py 2>&1 | grep -v -i warn | tee -a $D/steps.log
tar -czf "$OUT/c6.tgz" -C /tmp c6 2>/dev/null
