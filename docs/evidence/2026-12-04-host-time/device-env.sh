# device env (24th session): system python + the CuTe DSL bundle, multicast off; leaves no shell option set
export GEMM_RS_SYSTEM_PYTHON=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. ci/setup.sh || exit 1
set +euo pipefail
