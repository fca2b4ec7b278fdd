# call 5 (23rd session): the two new fixed tests on the fused kernel -- test_model_shapes (N = 7168, K = 448 on the
# fused path; N = 2880, K = 1440 on its declared fallback) and test_late_rank (the last rank 2 s late) at W = 1..16.
. .kwt/env.sh
D=/tmp/c5; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache5
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=1,2,4,8,16 GEMM_RS_REPORT_DIR=$D/r timeout -k 5 ${LIMIT:-130} \
  env PYTHONOPTIMIZE=1 python3 -m pytest -n 5 fuzz/test_gemm_rs.py -k "test_model_shapes or test_late_rank" -q -p no:cacheprovider -rs --durations=12 > $D/pytest.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - t0 )) s" | tee $D/steps.log
python3 - $D >> $D/steps.log 2>&1 <<'PY'
import collections, glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/r/*.jsonl")):
    for line in open(f):
        r = json.loads(line); c = r["case"]
        bad = [ch["name"] for ch in r.get("checks", []) if ch.get("passed") is False and not ch.get("skipped")]
        paths = collections.Counter(ch.get("extra", {}).get("path") for ch in r.get("checks", []) if ch.get("name") == "path_taken")
        print(r["test"].split("::")[1], r["status"], round(r["seconds"], 2), "N", c["N"], "K", c["K"], "ms", c["ms"],
              "late", c["late_rank"], c["delay_ms"], "checks", len(r.get("checks", [])), "failed", bad, dict(paths))
PY
tail -22 $D/pytest.log | cut -c1-220 >> $D/steps.log
tar -czf "$OUT/c5.tgz" -C /tmp c5 2>/dev/null
cat $D/steps.log
