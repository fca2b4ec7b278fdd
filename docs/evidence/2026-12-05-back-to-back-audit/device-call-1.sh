# call 1 (32nd session, one GPU): this session's gate changes on the GPU -- calls back to back (Case.burst, the
# fixed test_back_to_back), the bad-call table's row-strided x / w and partly overlapping outs, guarded outs 16 bytes
# past a 32-byte boundary -- and the 31st session's (declared_config_served, checks that compared nothing skipped):
# the fused and unfused gates, then the new write-after-read fault build alone.
. .kwt/env.sh   # docs/evidence/2026-12-04-host-time/device-env.sh
D=/tmp/d1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $D/steps.log
count() {
python3 - "$1" <<'PY' | tee -a $D/steps.log
import glob, json, sys, collections
skips, declared, status, burst, bad = (collections.Counter() for _ in range(5))
for f in glob.glob(sys.argv[1] + "/cases-*.jsonl"):
    for line in open(f):
        r = json.loads(line); status[r["status"]] += 1
        for c in (r.get("checks") or []):
            if not isinstance(c, dict):
                continue
            ex = c.get("extra") or {}
            state = "skipped" if c.get("skipped") else "passed" if c.get("passed") else "failed"
            if c.get("name") == "declared_config_served":
                declared[state] += 1
            if str(ex.get("call", "")).startswith("burst"):
                burst[state] += 1
            if ex.get("bad") in ("x_row_strided", "w_row_strided", "out_inside_x", "out_before_x", "out_inside_w"):
                bad[(ex["bad"], state)] += 1
            if c.get("skipped"):
                d = str(c.get("detail"))
                key = ("no valid rows" if "no valid rows" in d else "no finite truth" if "non-finite in bf16" in d
                       else "no guard regions" if "no guard regions" in d else d[:60])
                skips[(c["name"], key)] += 1
print("cases by status:", dict(status))
print("checks of calls made back to back (burst<i>):", dict(burst))
print("new bad-call entries:", dict(bad))
print("declared_config_served:", dict(declared) or "none made")
for k, v in sorted(skips.items(), key=lambda kv: -kv[1])[:12]:
    print(f"  skipped {v:5d}  {k[0]}: {k[1]}")
PY
}
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 170 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 150 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
echo "gate fused W=2,4,8 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-fused/summary.md | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -E "^- failed|FAIL" $D/gate-fused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
count $D/gate-fused
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
timeout -k 10 90 ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit 75 \
  --report-dir $D/gate-unfused > $D/gate-unfused.log 2>&1
echo "gate unfused W=2,4 rc=$? $(( $(date +%s) - s )) s (at $(el))" | tee -a $D/steps.log
head -3 $D/gate-unfused/summary.md | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -E "^- failed|FAIL" $D/gate-unfused/summary.md | head -5 | cut -c1-300 | tee -a $D/steps.log
count $D/gate-unfused
rm -rf /tmp/gemm-rs-pool-*; s=$(date +%s)
left=$(( 565 - $(el) ))
timeout -k 10 $left ./ci/kill-matrix --gpu --impl FusedDoneWaitSkipped --no-correct --jobs 1 > $D/kill-done-wait.log 2>&1
echo "kill FusedDoneWaitSkipped rc=$? $(( $(date +%s) - s )) s (at $(el), limit $left s)" | tee -a $D/steps.log
grep -E "kill rate|SURVIVED|RACE|KILLED|ERROR" $D/kill-done-wait.log | head -8 | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/d1.tgz" -C /tmp d1 2>/dev/null
