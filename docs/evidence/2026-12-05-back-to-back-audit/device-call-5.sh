# call 5 (32nd session, a fresh GPU): the bad-call family's lone rank (bad_call_rejected_alone and the valid call
# after it) on the fused kernel and the unfused path, after the first four calls.
. .kwt/env.sh; D=/tmp/d5; mkdir -p $D; cd "$GEMM_RS_ROOT"; export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache; s=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_IMPL=fused,unfused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=2,4 GEMM_RS_REPORT_DIR=$D/bad \
  timeout -k 5 140 env PYTHONOPTIMIZE=1 python3 -m pytest -n 8 fuzz/test_gemm_rs.py -k test_bad_call -q -p no:cacheprovider -rs > $D/bad.log 2>&1
echo "bad_call rc=$? $(( $(date +%s) - s )) s" | tee -a $D/steps.log
tail -2 $D/bad.log | cut -c1-250 | tee -a $D/steps.log
python3 - $D/bad <<'PY' | tee -a $D/steps.log
import glob, json, sys, collections
st, alone, after = collections.Counter(), collections.Counter(), collections.Counter()
for f in glob.glob(sys.argv[1] + "/cases-*.jsonl"):
    for line in open(f):
        r = json.loads(line); st[(r["impl"], r["world_size"], r["status"])] += 1
        for c in (r.get("checks") or []):
            if not isinstance(c, dict):
                continue
            state = "skipped" if c.get("skipped") else "passed" if c.get("passed") else "failed"
            if c.get("name") == "bad_call_rejected_alone":
                alone[(r["impl"], state)] += 1
            if (c.get("extra") or {}).get("call") == "after_alone":
                after[(r["impl"], state)] += 1
print("cases:", dict(st)); print("bad_call_rejected_alone:", dict(alone)); print("checks of the call after:", dict(after))
PY
tar -czf "$OUT/d5.tgz" -C /tmp d5 2>/dev/null
