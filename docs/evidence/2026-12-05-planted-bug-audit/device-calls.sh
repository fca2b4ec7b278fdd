# The three device calls of the 33rd session (one H200), each run as `bash .kwt/cN.sh` with carry [".device"];
# .kwt/env.sh is docs/evidence/2026-12-04-host-time/device-env.sh and .kwt/count.py is count.py beside this file.
# --- call 1: the gates, then the graph and layers tests alone -------------------------------------------------------
. .kwt/env.sh
D=/tmp/d1; mkdir -p $D && cd "$GEMM_RS_ROOT"
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export GEMM_RS_KERNEL_CACHE_DIR=/tmp/kcache
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 200 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4,8 --time-limit 180 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
python3 .kwt/count.py $D/gate-fused
rm -rf /tmp/gemm-rs-pool-*
timeout -k 10 100 ./ci/gate --profile ci --impl unfused --topology shared-gpu --world-sizes 2,4 --time-limit 85 \
  --report-dir $D/gate-unfused > $D/gate-unfused.log 2>&1
python3 .kwt/count.py $D/gate-unfused
rm -rf /tmp/gemm-rs-pool-*
GEMM_RS_IMPL=fused GEMM_RS_TOPOLOGY=shared-gpu GEMM_RS_WORLD_SIZES=2,4,8 GEMM_RS_REPORT_DIR=$D/graph-layers \
  timeout -k 10 $(( 560 - $(el) )) python3 -O -m pytest -q -p no:cacheprovider -n 3 fuzz/test_gemm_rs.py \
  -k "test_graph_replay or test_layers" > $D/graph-layers.log 2>&1
python3 .kwt/count.py $D/graph-layers
# --- call 2: the whole GPU kill matrix ----------------------------------------------------------------------------
timeout -k 10 560 ./ci/kill-matrix --gpu --jobs 4 > $D/kill.log 2>&1
# --- call 3: the literal release-gate command --------------------------------------------------------------------
GEMM_RS_REPORT_DIR=$D/literal PYTHONOPTIMIZE=1 timeout -k 10 540 python3 -m pytest -n auto fuzz/ > $D/literal.log 2>&1
python3 .kwt/count.py $D/literal
# --- call 4 (34th session, came up as an H100): the own-stream control, then the fused gate, at 551207d --------------
# (same .kwt/env.sh, count.py; D=$OUT)
timeout -k 10 120 ./ci/gate --profile ci --impl mutants.dimension_faults:FusedOnItsOwnStream --topology shared-gpu \
  --world-sizes 2,4 --time-limit 100 --report-dir $D/gate-own-stream > $D/gate-own-stream.log 2>&1
python3 .kwt/count.py $D/gate-own-stream
timeout -k 10 150 ./ci/gate --profile ci --impl fused --topology shared-gpu --world-sizes 2,4 --time-limit 130 \
  --report-dir $D/gate-fused > $D/gate-fused.log 2>&1
python3 .kwt/count.py $D/gate-fused
