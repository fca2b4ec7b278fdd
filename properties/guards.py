"""Guard (red-zone) regions: bytes around ``out`` and after a workspace or flag area are filled with a
known pattern before a call and must be bit-identical afterwards. A write one row past ``out`` or past
``max_M`` in a workspace changes them; nothing else would show it.

:class:`Guarded` allocates ``[front guard | payload | back guard]`` in one buffer and hands out the
payload as an ordinary contiguous tensor, so the implementation sees a normal ``out=``.
"""

from __future__ import annotations

import torch

from .result import CheckResult, read_back, skipped, worst_of

GUARD_ROWS = 2
#: Why ``guard_regions_untouched`` is skipped where a call has no guard region to read: no ``out=`` (a fresh result)
#: and an instance that keeps no guarded workspace (the fused kernel at W = 1 without split-K parts).
NO_GUARD_REGIONS = "no guard regions here (no out=, and the instance keeps no guarded workspace)"
ALIGN_WORDS = 8  # 16 bytes of bf16


def guard_pattern(n: int, seed: int = 0x5EED, device="cpu") -> torch.Tensor:
    """n int16 words, deterministic, never a whole row of one value (so zero-fills and copies show): word i is
    ``(i * 40503 + 7919 * seed) mod 2^16`` (neighbours differ by 40503 mod 2^16, so no two neighbours are
    equal), built on ``device`` itself (no copy from the host: on a GPU that ranks time-slice, a copy from
    pageable memory waits for the device)."""
    idx = torch.arange(n, dtype=torch.int64, device=device)
    return ((idx * 40503 + 7919 * int(seed)) % 65536 - 32768).to(torch.int16)


class Guarded:
    """A (rows, cols) bf16 tensor with ``guard_rows`` guarded rows before and after it."""

    def __init__(self, rows: int, cols: int, *, device="cpu", guard_rows: int = GUARD_ROWS, seed: int = 0x5EED):
        self.rows, self.cols, self.g = rows, cols, guard_rows
        gw = guard_rows * cols
        # the payload starts 16-byte aligned whatever cols is (the contract's alignment for out=), and no more: 16
        # bytes past a 32-byte boundary (so at no 64-, 128- or 256-byte boundary either). Until the 32nd session 2
        # guard rows of any N % 8 == 0 put it at a multiple of 32 bytes, so an epilogue assuming a wider alignment
        # than the contract's passed every case
        self.front_words = -(-gw // ALIGN_WORDS) * ALIGN_WORDS
        if (self.front_words // ALIGN_WORDS) % 2 == 0:
            self.front_words += ALIGN_WORDS
        self.buffer = torch.empty(rows * cols + self.front_words + gw, dtype=torch.bfloat16, device=device)
        self.front = guard_pattern(self.front_words, seed, device)
        self.back = guard_pattern(gw, seed + 1, device)
        words = self.buffer.view(torch.int16)
        words[: self.front_words].copy_(self.front)
        words[words.numel() - gw :].copy_(self.back)
        self.payload = self.buffer[self.front_words : self.front_words + rows * cols].view(rows, cols)

    def regions(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """name -> (current int16 words, expected int16 words)."""
        words = self.buffer.view(torch.int16)
        gw = self.g * self.cols
        return {
            "before out": (words[: self.front_words], self.front),
            "after out": (words[words.numel() - gw :], self.back),
        }

    def check(self, *, rank=None) -> CheckResult:
        return guard_regions_untouched(self.regions(), rank=rank)


def guard_regions_untouched(regions: dict[str, tuple[torch.Tensor, torch.Tensor]], *, rank=None,
                            name="guard_regions_untouched") -> CheckResult:
    """Every region's current words equal its expected words. Reports the first region that changed,
    with the word offset and count. No region at all (a call without ``out=`` on an instance that keeps no guarded
    workspace: the fused kernel at W = 1 without split-K parts) is a skip (:data:`NO_GUARD_REGIONS`), not a pass."""
    if not regions:
        return skipped(name, NO_GUARD_REGIONS, rank=rank, per_example=True)
    total, wrong_total, first = 0, 0, None
    compared = []
    for region, (now, expected) in regions.items():
        now_c = now.detach().reshape(-1)
        exp_c = expected.detach().to(now_c.device).reshape(-1)
        compared.append((region, now_c, exp_c, now_c != exp_c))
    # every region's count read back at once (one wait for the device, not one per region)
    counts = read_back(c.sum() for *_, c in compared)
    for (region, now_c, exp_c, changed), n in zip(compared, map(int, counts)):
        total += now_c.numel()
        wrong_total += n
        if n and first is None:
            err = changed.double()
            first = worst_of(name, changed, err, now_c.double(), exp_c.double(), 0.0, rank=rank)
            first.worst_row = None  # the index is a word offset in the region, not a row of Y
            first.detail = f"region '{region}': {n} of {now_c.numel()} 16-bit words changed"
    if first is None:
        return CheckResult(name=name, passed=True, rank=rank, total=total,
                           detail=f"{len(regions)} guard regions intact")
    first.total, first.n_wrong = total, wrong_total
    return first
