# call 1 (23rd session): the nightly step as pipelines run it, the whole GPU matrix (./ci/kill-matrix --gpu:
# every fault build + wrapper mutant, controls per world-size set; expect rc 0 and six RACE lines), then the fused
# gate W = 2, 4, 8 -- the first GPU run of the 22nd session's scheduler, interface-method rule and trail calls.
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi -L; nproc; python3 -c "import cutlass, torch, pytest; print('cutlass ok', torch.__version__, pytest.__version__)"; } > $D/host.log 2>&1
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 ${KLIMIT:-330} ./ci/kill-matrix --gpu --jobs 4 --report-dir $D/kill > $D/kill.log 2>&1
echo "ci/kill-matrix --gpu rc=$? at $(el) s" | tee $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|FAILED|PASSED|kill rate|MISMATCH|RACE" $D/kill.log | cut -c1-300 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
s=$(date +%s)
left=$(( 560 - $(el) ))
timeout -k 5 $left env PYTHONOPTIMIZE=1 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -E "VERDICT|cases, " $D/gate-fused.log | tail -2 | cut -c1-200 | tee -a $D/steps.log
grep -h -E "^- (failed|error|hang|died)" $D/gate-fused/*.md 2>/dev/null | head -5 | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
cat $D/host.log
