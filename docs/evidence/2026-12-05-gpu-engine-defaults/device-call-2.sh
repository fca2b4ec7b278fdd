# call 2 (30th session): the unfused gate on the GPU again after the fix (its host staging named "cpu": under an
# engine's torch.device("cuda") default it was built on the GPU and pinning raised), then the literal release-gate
# command (PYTHONOPTIMIZE=1 pytest -n auto fuzz/) at the fix.
. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $D/steps.log
git log --oneline -1 2>/dev/null | tee -a $D/steps.log; git diff --stat -- kernel 2>/dev/null | tail -1 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 100 ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit 60 \
  --report-dir $D/gate-unfused > $D/gate-unfused.log 2>&1
echo "gate unfused W=2,4 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-unfused/summary.md | tail -1 | cut -c1-160 | tee -a $D/steps.log
echo "engine-default cases: $(cat $D/gate-unfused/cases-*.jsonl | grep -c 'engine defaults')" | tee -a $D/steps.log
grep -E "^- failed" $D/gate-unfused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 70 ./ci/gate --profile ci --impl mutants.catalogue:StagingOnDefaultDevice --topology shared-gpu --world-sizes 2 \
  --time-limit 30 --report-dir $D/gate-staging-mutant > $D/gate-staging-mutant.log 2>&1
echo "gate StagingOnDefaultDevice W=2 rc=$? $(( $(date +%s) - s )) s (at $(el)) [expected: FAIL, call_raised]" | tee -a $D/steps.log
head -3 $D/gate-staging-mutant/summary.md | tail -1 | cut -c1-160 | tee -a $D/steps.log
grep -E "^- failed" $D/gate-staging-mutant/summary.md | head -2 | cut -c1-600 | tee -a $D/steps.log
grep -A1 "^- failed" $D/gate-staging-mutant/summary.md | grep why | head -1 | cut -c1-300 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 130 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4 --time-limit 90 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-160 | tee -a $D/steps.log
python3 - $D/gate-fused <<'PY' | tee -a $D/steps.log
import glob, json, sys, collections
c = collections.Counter()
for f in glob.glob(sys.argv[1] + "/cases-*.jsonl"):
    for line in open(f):
        r = json.loads(line); s = json.dumps(r)
        paths = {p["path"] for calls in (r.get("paths") or {}).values() for p in calls}
        c[(r["case"].get("family") if isinstance(r.get("case"), dict) else "?", "engine defaults" in s, ",".join(sorted(paths)), r["status"])] += 1
for k, v in sorted(c.items(), key=str): print(v, k)
PY
grep -E "^- failed" $D/gate-fused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
