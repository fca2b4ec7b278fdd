tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d10; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
for impl in fused unfused; do
rm -rf /tmp/gemm-rs-pool-*
timeout -k 5 200 ./ci/gate --profile ci --impl $impl --topology shared-gpu --world-sizes 2,4 --time-limit 150 --report-dir $D/gate-$impl > $D/gate-$impl.log 2>&1
echo "gate $impl W=2,4 rc=$? at $(el) s" >> $D/steps.log
python3 .kwt/count.py $D/gate-$impl >> $D/steps.log; grep -h "VERDICT\|cases," $D/gate-$impl/summary.md | head -3 >> $D/steps.log
python3 - $D/gate-$impl >> $D/steps.log <<'PY'
import json,glob,sys,collections
v=collections.Counter()
for f in glob.glob(sys.argv[1]+'/cases-*.jsonl'):
    for l in open(f):
        r=json.loads(l)
        for c in r.get('checks',[]):
            if c.get('name') in ('inputs_changed_in_place','memory_bounded'):
                v[(c['name'], 'skipped' if c.get('skipped') else c.get('passed'))]+=1
print('checks:', dict(v))
PY
done
cat $D/steps.log
