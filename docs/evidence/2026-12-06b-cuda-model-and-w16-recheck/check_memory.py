"""Peak GPU memory of the three blocked checks on the W = 16 case's shard (4096 x 8192, 2-rank groups, K = 1664),
checked in blocks (properties.result.BLOCK_ELEMENTS, the default) and as one block (the 36th session's behaviour):
  python3 docs/evidence/2026-12-06b-cuda-model-and-w16-recheck/check_memory.py
Each check's result must be the same both ways (field by field); the peak is above what the inputs already hold."""
import sys

import torch

import properties.result as result
from oracle.truth import seeded_shard_truth
from properties import bitwise_equal, nonfinite_pattern_matches, within_tolerance

small = "--cpu-small" in sys.argv  # a quick look at the script itself on a machine with no GPU
dev = torch.device("cpu" if small else "cuda")
M, N, K, W, rank = (63, 64, 64, 2, 0) if small else (8191, 8192, 1664, 2, 0)
truth = seeded_shard_truth(5, "exact", rank, M, N, K, W, device=dev)
n, (S, _) = truth.n_valid, truth.y.shape
y = truth.y.to(torch.bfloat16)
bad = y.clone()
bad[n - 1, N - 1] = float("nan")  # one element NaN: every check must fail at the shard's last valid element
expected = truth.y[:n].to(torch.bfloat16)
checks = {
    "within_tolerance": lambda a: within_tolerance(a, truth, rank=rank),
    "bitwise_equal": lambda a: bitwise_equal(a, expected, n, rank=rank),
    "nonfinite_pattern_matches": lambda a: nonfinite_pattern_matches(a, expected, n, rank=rank),
}
fields = ("passed", "total", "n_wrong", "n_nan", "n_inf", "worst_index", "worst_row", "worst_error")
ok = True
print(f"shard {S} x {N} ({n} valid rows), device {dev if small else torch.cuda.get_device_name()}")
for name, check in checks.items():
    row = {}
    for label, block in (("blocks", 1 << 10 if small else 1 << 22), ("one block", 1 << 62)):
        result.BLOCK_ELEMENTS = block
        for which, a in (("right", y), ("one NaN", bad)):
            if small:
                r, peak = check(a), 0.0
            else:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                r = check(a)
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - base) / 2**30
            row[(label, which)] = (tuple(repr(getattr(r, f)) for f in fields), peak)  # repr: NaN equals NaN
    for which in ("right", "one NaN"):
        same = row[("blocks", which)][0] == row[("one block", which)][0]
        ok &= same
        print(f"{name:26s} {which:8s} peak GiB: blocks {row[('blocks', which)][1]:.2f}, one block "
              f"{row[('one block', which)][1]:.2f}; same result: {same}; passed={row[('blocks', which)][0][0]}")
    ok &= row[("blocks", "right")][0][0] == "True" and row[("blocks", "one NaN")][0][0] == "False"
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
