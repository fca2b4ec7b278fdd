# call 4 (22nd session): FusedGlobalRankAtLaunch after device_fault's fix (torch's advice "device-side assertions"
# no longer read as a torch assert), beside FusedWorkspaceSharedAcrossGroups (W = 4).
. .kwt/env.sh
D=/tmp/c4; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
timeout -k 5 230 python3 -O -m mutants.meta --gpu --optimize 1 --no-correct --jobs 2 \
  --impl FusedGlobalRankAtLaunch,FusedWorkspaceSharedAcrossGroups --report-dir $D/kill > $D/kill.log 2>&1
echo "kill rc=$? at $(( $(date +%s) - t0 )) s" | tee $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|harness|kill rate" $D/kill.log | cut -c1-400 | tee -a $D/steps.log
python3 -c "
import json
for r in json.load(open('$D/kill/kill-matrix.json')): print(r['name'], r['verdict'], r['caught_by'], r['detail'][:300])
" | tee -a $D/steps.log
tar -czf "$OUT/c4.tgz" -C /tmp c4 2>/dev/null
