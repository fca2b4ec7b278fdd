# call 1 (31st session, one GPU): the session's changes on the GPU -- the fused kernel built under
# torch.inference_mode() (kernel test, and every rotating case of the gate now builds under it), value checks
# skipped on ranks with no valid row -- then the GPU kill matrix.
. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/d1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $D/steps.log
s=$(date +%s)
PYTHONPATH="$GEMM_RS_ROOT${PYTHONPATH:+:$PYTHONPATH}" timeout -k 5 150 python3 .kwt/inference_check.py > $D/kernel-test.log 2>&1
echo "kernel test rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
tail -3 $D/kernel-test.log | cut -c1-300 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 150 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 120 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -E "^- failed" $D/gate-fused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
python3 - $D/gate-fused <<'PY' | tee -a $D/steps.log
import glob, json, sys, collections
built, novalid, rot = collections.Counter(), collections.Counter(), 0
for f in glob.glob(sys.argv[1] + "/cases-*.jsonl"):
    for line in open(f):
        r = json.loads(line); s = json.dumps(r)
        rot += '"autograd": "rotate"' in s or '"autograd":"rotate"' in s
        built[r["status"]] += "[inference_mode]" in s
        for c in (r.get("checks") or []):
            if isinstance(c, dict) and c.get("skipped") and "no valid rows" in str(c.get("detail")):
                novalid[c["name"]] += 1
print("cases mentioning an inference-mode construction or call, by status:", dict(built), "rotating:", rot)
print("value checks skipped on ranks with no valid row:", dict(novalid))
PY
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 80 ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit 60 \
  --report-dir $D/gate-unfused > $D/gate-unfused.log 2>&1
echo "gate unfused W=2,4 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-unfused/summary.md | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -E "^- failed" $D/gate-unfused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
left=$(( 560 - $(el) ))
timeout -k 10 $left ./ci/kill-matrix --gpu --jobs 4 > $D/kill-matrix-gpu.log 2>&1
echo "kill-matrix --gpu rc=$? $(( $(date +%s) - s )) s (at $(el), limit $left s)" | tee -a $D/steps.log
grep -E "kill rate|SURVIVED|RACE|FAILED|control" $D/kill-matrix-gpu.log | head -20 | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/d1.tgz" -C /tmp d1 2>/dev/null
