# call 3 (32nd session, the same warm GPU): the kernel's GPU tests (tests/kernel; the rest of tests/ and the CPU
# mutants left behind to fit the 64 MiB a call carries beside the CuTe DSL bundle).
. .kwt/env.sh; D=/tmp/d3; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
timeout -k 10 540 python3 -m pytest -q -n 4 -p no:cacheprovider -rs tests/kernel > $D/kernel-tests.log 2>&1
echo "tests/kernel rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
tail -15 $D/kernel-tests.log | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/d3.tgz" -C /tmp d3 2>/dev/null
