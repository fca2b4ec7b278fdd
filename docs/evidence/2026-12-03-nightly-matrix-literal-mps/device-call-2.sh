# call 2 (23rd session): the users' literal command, PYTHONOPTIMIZE=1 pytest -n auto fuzz/, on one H200 with the
# host's pytest 9 (its ids carry no xdist @group suffix: the controller's place scheduler of the 22nd session
# decides which worker runs which GPU test, first run of it in the literal command), cold kernel cache.
. .kwt/env.sh
D=/tmp/c2; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s)
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache2
GEMM_RS_REPORT_DIR=$D/report timeout -k 5 ${LIMIT:-500} env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs --durations=15 > $D/pytest.log 2>&1
echo "literal rc=$? $(( $(date +%s) - t0 )) s" | tee $D/steps.log
python3 - $D > $D/checks.txt 2>&1 <<'PY'
import collections, glob, json, sys
status, checks = collections.Counter(), collections.Counter()
for f in glob.glob(sys.argv[1] + "/report/**/*.jsonl", recursive=True):
    for line in open(f):
        try:
            r = json.loads(line)
        except Exception:
            continue
        if not isinstance(r, dict):
            continue
        status[r.get("status")] += 1
        for ch in (r.get("checks") or []):
            if isinstance(ch, dict):
                checks[(ch.get("name"), "skipped" if ch.get("skipped") else ch.get("passed"))] += 1
print("case statuses:", dict(status))
for k, v in sorted(checks.items(), key=str):
    print(k, v)
PY
head -3 $D/checks.txt | tee -a $D/steps.log
grep -c "False" $D/checks.txt | sed 's/^/check kinds with a failure: /' | tee -a $D/steps.log
tail -25 $D/pytest.log | cut -c1-250 | tee -a $D/steps.log
tar -czf "$OUT/c2.tgz" -C /tmp c2 2>/dev/null
