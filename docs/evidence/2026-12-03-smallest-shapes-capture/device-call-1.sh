# call 1 (21st session): the capacity check under CUDA-graph capture (capacity_rejected_in_capture) and the smallest
# shapes (test_smallest_shapes) on the GPU: the wrapper mutant FusedCapacityUncheckedInCapture in the GPU kill
# matrix; the fused gate W = 2, 4, 8; W = 1, 16 of the new tests; unfused on shared-gpu.
. .kwt/env.sh
D=/tmp/c1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ nvidia-smi -L; nproc; python3 -c "import cutlass; print('cutlass ok')"; } > $D/host.log 2>&1
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
gate() {  # name impl world-sizes limit
  rm -rf /tmp/gemm-rs-pool-*
  s=$(date +%s)
  timeout -k 5 $4 env PYTHONOPTIMIZE=1 ./ci/gate --profile ci --impl $2 --topology shared-gpu --world-sizes $3 --report-dir $D/gate-$1 > $D/gate-$1.log 2>&1
  echo "gate $1 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
  grep -E "VERDICT|cases, " $D/gate-$1.log | tail -2 | cut -c1-200 | tee -a $D/steps.log
}
s=$(date +%s)
timeout -k 5 150 python3 -O -m mutants.meta --gpu --optimize 1 --no-correct --impl FusedCapacityUncheckedInCapture \
  --report-dir $D/kill > $D/kill.log 2>&1
echo "kill rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
grep -E "KILLED|SURVIVED|ERROR|kill rate" $D/kill.log | cut -c1-250 | tee -a $D/steps.log
gate fused fused 2,4,8 170
rm -rf /tmp/gemm-rs-pool-*
s=$(date +%s)
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=1,16 GEMM_RS_REPORT_DIR=$D/r-w1-16 timeout -k 5 160 \
  env PYTHONOPTIMIZE=1 python3 -m pytest -n 2 fuzz/test_gemm_rs.py -k "test_smallest_shapes or test_capacity" -q -p no:cacheprovider -rs > $D/w1-16.log 2>&1
echo "w1-16 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -3 $D/w1-16.log | tee -a $D/steps.log
left=$(( 560 - $(el) ))
[ $left -gt 60 ] && gate unfused unfused 2,4 $left
python3 - $D > $D/checks.txt 2>&1 <<'PY'
import collections, glob, json, sys
c = collections.Counter()
for f in glob.glob(sys.argv[1] + "/**/*.jsonl", recursive=True):
    for line in open(f):
        try:
            r = json.loads(line)
        except Exception:
            continue
        for rank in (r.get("checks") or []):
            ch = rank if isinstance(rank, dict) else None
            if ch and ch.get("name") in ("capacity_rejected_in_capture", "capacity_rejected"):
                c[(f.split("/")[3], ch["name"], "skipped" if ch.get("skipped") else ch.get("passed"))] += 1
        case = r.get("case") or {}
        if case.get("N") == 1 or case.get("K") == 1:
            c[(f.split("/")[3], "N/K=1 case", r.get("status"))] += 1
for k, v in sorted(c.items(), key=str):
    print(k, v)
PY
cat $D/checks.txt | tee -a $D/steps.log
tar -czf "$OUT/c1.tgz" -C /tmp c1 2>/dev/null
grep -h -E "^E .*(FAILED|\[)|FAILED" $D/*.log | head -20
cat $D/steps.log
