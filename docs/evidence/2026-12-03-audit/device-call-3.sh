# call 3 (20th session): the literal release-gate command on one H200 with the audit's checks.
. .kwt/env.sh
D=/tmp/c3; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
export TL_T0=$(date +%s.%N) TL_LOG=$D/timeline.txt
PYTHONPATH=$GEMM_RS_ROOT/.kwt:$PYTHONPATH GEMM_RS_REPORT_DIR=$D/report timeout -k 5 420 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -p tlplugin -rs --durations=10 > $D/pytest.log 2>&1
echo "literal rc=$? $(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),2))" $TL_T0) s" | tee $D/steps.log
tar -czf "$OUT/c3.tgz" -C /tmp c3 2>/dev/null
grep -v -e Benchmark -e warner $D/pytest.log | tail -15
