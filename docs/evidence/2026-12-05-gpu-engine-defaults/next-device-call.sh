# Prepared in the 30th session for the next one with a device (one GPU, about 520 s of it): what this session could
# not finish. Run from the project root with docs/evidence/2026-12-04-host-time/device-env.sh as .kwt/env.sh, the
# CuTe DSL bundle in .device/, carry [".device"], the tree without docs/, README.md, bench/ and tests/ but
# tests/scheduling.py (64 MiB a call carries; the bundle takes 63 of them).
. .kwt/env.sh
D=/tmp/n2; mkdir -p $D && cd "$GEMM_RS_ROOT"
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
# 1. the literal release-gate command to its end (cut at 375 s / 96 % in the 30th session: 1427 cases, all passed)
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_REPORT_DIR=$D/literal timeout -k 5 500 env PYTHONOPTIMIZE=1 python3 -m pytest -n auto fuzz/ -q -p no:cacheprovider -rs > $D/literal.log 2>&1
echo "literal rc=$? (at $(el) s)" | tee -a $D/steps.log
tail -2 $D/literal.log | cut -c1-200 | tee -a $D/steps.log
head -3 $D/literal/summary.md 2>/dev/null | tail -1 | cut -c1-200 | tee -a $D/steps.log
grep -A6 "Checks no case made" $D/literal/summary.md | cut -c1-400 | tee -a $D/steps.log
tar -czf "$OUT/n2.tgz" -C /tmp n2 2>/dev/null
# 2. (a second call) ./ci/kill-matrix --gpu --jobs 4 (the 27th session's 21/26 on the launch path of then; since:
#    the ambient and engine-default checks, test_dispatch_crossover, the padding and one-rank agreement skips)
