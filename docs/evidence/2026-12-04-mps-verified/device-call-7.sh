# call 7 (26th session): four more 128-row tile configs beside pull's at the GEMM-core points (tiles_exp.py)
. .kwt/env.sh
D=/tmp/c7; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); timeout 330 python3 .kwt/tiles_exp.py > $D/tiles.txt 2>&1; echo "tiles rc=$? $(( $(date +%s) - s )) s" >> $D/tiles.txt
tar -czf "$OUT/c7.tgz" -C /tmp c7 2>/dev/null
