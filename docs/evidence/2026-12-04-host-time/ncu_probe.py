"""One torch.mm and one of ours at M x N x K, between cudaProfilerStart/Stop (for ncu --profile-from-start off)."""
import sys

import torch

from kernel.fused.wrapper import FusedGemmRs

M, N, K = (int(v) for v in sys.argv[1:4])
dev = torch.device("cuda", 0)
x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
impl = FusedGemmRs(max_M=M, N=N, K=K, device=dev, force_fused=True)
out, out2 = (torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    torch.mm(x, w.T, out=out)
    impl(x, w, out=out2)
torch.cuda.synchronize()
print("equal", torch.equal(out, out2), "tile", impl.tile_configs()[impl.tile_config_index(M)].label, flush=True)
torch.cuda.cudart().cudaProfilerStart()
torch.mm(x, w.T, out=out)
impl(x, w, out=out2)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
