"""tests/kernel/test_fused_wrapper.py::test_built_under_inference_mode_its_state_serves_calls_in_every_mode, standalone
(the test file does not fit the 64 MiB a device call carries beside the CuTe DSL bundle). As run in call 1, but for
its asserts, raised errors since (they would vanish under -O; the run was without it)."""
import torch

from kernel.fused import FusedGemmRs


def require(ok, what=""):
    if not ok:
        raise SystemExit(f"FAILED: {what}")


N, K, M = 2560, 8192, 448
g = torch.Generator().manual_seed(11)
x = torch.randint(-2, 3, (M, K), generator=g).to(torch.bfloat16).cuda()
w = torch.randint(-2, 3, (N, K), generator=g).to(torch.bfloat16).cuda()
want_exact = torch.mm(x.float(), w.float().t()).bfloat16()
with torch.inference_mode():
    impl = FusedGemmRs(max_M=1024, N=N, K=K, device=torch.device("cuda", 0), force_fused=True, protocol="pull")
state = impl.state_tensors()
print("state tensors:", sorted(state), "inference:", [k for k, t in state.items() if t.is_inference()])
require(state and not [k for k, t in state.items() if t.is_inference()])
print("path at M:", impl.call_path(M))
first = None
for mode in (torch.no_grad, torch.enable_grad, torch.inference_mode, torch.no_grad):
    with mode():
        y = impl(x, w)
    torch.cuda.synchronize()
    require(impl.last_path == "fused", impl.last_path)
    require(torch.equal(y, want_exact), (mode.__name__, (y.float() - want_exact.float()).abs().max()))
    first = y.clone() if first is None else first
    require(torch.equal(y, first))
    print(mode.__name__, "ok: fused, bitwise equal to torch.mm on exact inputs")
impl.advance_call_counter(3)
require(torch.equal(impl(x, w), want_exact))
print("advance_call_counter(3) after an inference-mode construction: ok")
print("INFERENCE-MODE CONSTRUCTION PASS")
