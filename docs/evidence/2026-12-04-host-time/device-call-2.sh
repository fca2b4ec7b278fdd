# call 2 (27th session): 128x176 / 128x112 tiles, alone and clustered, at the N = 7168 points (tiles_exp2.py)
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
s=$(date +%s); timeout 400 python3 .kwt/tiles_exp2.py > $D/tiles.txt 2>&1; echo "tiles rc=$? $(( $(date +%s) - s )) s" >> $D/tiles.txt
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
tail -25 $D/tiles.txt
