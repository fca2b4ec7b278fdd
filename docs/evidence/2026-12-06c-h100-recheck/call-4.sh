tar -xJf .kwt/extra.tar.xz || exit 1
. .kwt/env.sh
D=$OUT/d9; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $D/steps.log
timeout -k 10 200 python3 -O -m mutants.meta --gpu --optimize 1 --no-correct --jobs 1 --impl FusedScratchPerMOutsidePython --report-dir $D/km > $D/km.log 2>&1
echo "kill matrix FusedScratchPerMOutsidePython rc=$? at $(el) s" >> $D/steps.log
tail -n 12 $D/km.log >> $D/steps.log
rm -rf /tmp/gemm-rs-pool-*
for impl in fused unfused; do
GEMM_RS_REPORT_DIR=$D/layers-$impl timeout -k 5 150 python3 -O -m pytest -q -p no:cacheprovider -n 2 fuzz/test_gemm_rs.py -k test_layers --impl $impl --topology shared-gpu --world-sizes 2,4 > $D/layers-$impl.log 2>&1
echo "test_layers $impl W=2,4 rc=$? at $(el) s" >> $D/steps.log
tail -n 2 $D/layers-$impl.log >> $D/steps.log
python3 - $D/layers-$impl >> $D/steps.log <<'PY'
import json,glob,sys,collections
v=collections.Counter()
for f in glob.glob(sys.argv[1]+'/cases-*.jsonl'):
    for l in open(f):
        r=json.loads(l)
        for c in r.get('checks',[]):
            if c.get('name')=='memory_bounded':
                v[(c.get('passed'),(c.get('extra') or {}).get('device_bytes_grown'))]+=1
print('memory_bounded (passed, device_bytes_grown):', dict(v))
PY
done
cat $D/steps.log
