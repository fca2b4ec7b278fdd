#!/bin/bash
# usage: run_plants.sh ID...   (one at a time: plant, run, record, revert)
cd /tmp/auditP || exit 1
export CUTE_DSL_ARCH=sm_90a CI=true GEMM_RS_KERNEL_CACHE_DIR=/tmp/auditP-kcache
DESEL="not test_default_builds_match_their_references and not test_plain_gemm_matches_its_reference"
for id in "$@"; do
  git checkout -q -- kernel/
  log=/tmp/auditP-work/plant-$id.log
  python3 /tmp/auditP-work/plants.py $id > $log 2>&1 || { echo "$id APPLY-FAIL" >> /tmp/auditP-work/summary.txt; continue; }
  t0=$(date +%s)
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/kernel -n 2 --tb=line -rf -k "$DESEL" >> $log 2>&1
  rc=$?
  if [[ $id == W* ]]; then
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/foundation -n 2 --tb=line -rf -k "fused or wrapper" >> $log 2>&1
    rc2=$?; else rc2=-; fi
  # hash pins alone, to record whether they would have caught it
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/kernel/test_fault_builds.py --tb=no -k "test_default_builds_match_their_references or test_plain_gemm_matches_its_reference" > $log.pins 2>&1
  rc3=$?
  git diff --stat kernel/ >> $log
  git checkout -q -- kernel/
  fails=$(grep -E "^FAILED" $log | sed 's/ - .*//' | sort -u | tr '\n' ' ')
  echo "$id rc=$rc rc_found=$rc2 pins_rc=$rc3 secs=$(( $(date +%s) - t0 )) FAILED: $fails" >> /tmp/auditP-work/summary.txt
done
echo DONE >> /tmp/auditP-work/summary.txt
