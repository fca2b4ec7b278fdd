# call 2 (21st session): the literal release-gate command on one H200 with the smallest shapes and the capacity
# check under capture; then the case records' counts of the new checks.
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
export TL_T0=$(date +%s.%N) TL_LOG=$D/timeline.txt
PYTHONPATH=$GEMM_RS_ROOT/.kwt:$PYTHONPATH GEMM_RS_REPORT_DIR=$D/report timeout -k 5 480 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -p tlplugin -rs --durations=10 > $D/pytest.log 2>&1
echo "literal rc=$? $(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),2))" $TL_T0) s" | tee $D/steps.log
python3 - $D > $D/checks.txt 2>&1 <<'PY'
import collections, glob, json, sys
c = collections.Counter()
cases = collections.Counter()
for f in glob.glob(sys.argv[1] + "/report/*.jsonl"):
    for line in open(f):
        try:
            r = json.loads(line)
        except Exception:
            continue
        cases[(r.get("impl"), r.get("topology"), r.get("status"))] += 1
        for ch in r.get("checks") or []:
            if ch.get("name") in ("capacity_rejected_in_capture", "fresh_result"):
                c[(r.get("impl"), ch["name"], "skipped" if ch.get("skipped") else ch.get("passed"))] += 1
        if (r.get("case") or {}).get("N") == 1 or (r.get("case") or {}).get("K") == 1:
            c[(r.get("impl"), r.get("topology"), "N/K=1 case", r.get("status"))] += 1
for k, v in sorted(c.items(), key=str):
    print(k, v)
for k, v in sorted(cases.items(), key=str):
    print("cases", k, v)
PY
cat $D/checks.txt
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
grep -v -e Benchmark -e warner $D/pytest.log | tail -15
