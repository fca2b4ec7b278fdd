# call 1 (22nd session): the whole GPU kill matrix (every fault-injected build of the fused kernel and every
# wrapper mutant, with the correct kernel as the control at each world-size set), -O1, 4 sessions at once.
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
{ nvidia-smi -L; nproc; git log --oneline -1 2>/dev/null; python3 -c "import cutlass; print('cutlass ok')"; } > $D/host.log 2>&1
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
python3 -O -m mutants.meta --gpu --optimize 1 --jobs ${JOBS:-4} --report-dir $D/kill > $D/kill.log 2>&1 &
pid=$!
( sleep ${LIMIT:-530}; echo "killed at the limit" >> $D/kill.log; pkill -INT -f "mutants.meta"; sleep 10; kill -9 $pid 2>/dev/null; pkill -9 -f pytest ) &
wait $pid; echo "kill matrix rc=$? $(( $(date +%s) - t0 )) s" | tee $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|FAILED|PASSED|kill rate|MISMATCH|killed at" $D/kill.log | cut -c1-300 | tee -a $D/steps.log
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
cat $D/host.log
