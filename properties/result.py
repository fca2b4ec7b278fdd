"""The result every checker returns: a verdict plus what locates a failure, rendered the way
``torch.testing.assert_close`` does ("Mismatched elements: 3 / 4096 ... at index (5, 7) ... allowed")."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


class PropertyViolation(AssertionError):
    """Raised by :meth:`CheckResult.raise_if_failed`; an AssertionError so pytest reports it as a failure
    (raised explicitly, so ``python -O`` keeps it)."""

    def __init__(self, result: CheckResult):
        super().__init__(result.render())
        self.result = result


@dataclass
class CheckResult:
    name: str
    passed: bool
    rank: int | None = None
    total: int = 0                 # elements (or items) examined
    n_wrong: int = 0
    n_nan: int = 0
    n_inf: int = 0
    worst_index: tuple | None = None
    worst_row: int | None = None   # global row of the worst element, when it is a row of Y
    worst_actual: float | None = None
    worst_expected: float | None = None
    worst_error: float | None = None
    allowed: float | None = None   # budget at the worst element
    detail: str = ""
    skipped: bool = False          # not applicable / waived: never counted as passed
    extra: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.passed

    def render(self) -> str:
        who = f" rank {self.rank}" if self.rank is not None else ""
        if self.skipped:
            return f"[{self.name}]{who}: SKIPPED — {self.detail}"
        verdict = "ok" if self.passed else "FAILED"
        lines = [f"[{self.name}]{who}: {verdict}"]
        if self.total:
            pct = 100.0 * self.n_wrong / self.total
            lines.append(f"Mismatched elements: {self.n_wrong} / {self.total} ({pct:.1f}%)")
        if self.worst_index is not None:
            where = f"at index {tuple(self.worst_index)}"
            if self.worst_row is not None:
                where += f" (global row {self.worst_row})"
            msg = f"Greatest absolute difference: {self.worst_error:.6g} {where}"
            if self.allowed is not None:
                msg += f" (up to {self.allowed:.6g} allowed)"
            lines.append(msg)
            lines.append(f"  actual {self.worst_actual!r}, expected {self.worst_expected!r}")
        if self.n_nan or self.n_inf:
            lines.append(f"Non-finite: {self.n_nan} NaN, {self.n_inf} Inf in the checked elements")
        if self.detail:
            lines.append(self.detail)
        return "\n".join(lines)

    def raise_if_failed(self) -> CheckResult:
        if not self.passed and not self.skipped:
            raise PropertyViolation(self)
        return self

    def to_json(self) -> dict:
        d = asdict(self)
        d["worst_index"] = list(self.worst_index) if self.worst_index is not None else None
        return d


#: The reason a value check (tolerance, exact bits, the non-finite pattern) is skipped on a rank that holds no valid
#: row of this call (M < W ranks' worth: M = 129 at W = 16 leaves rank 15 none): nothing examined, so no pass.
NO_VALID_ROWS = "no valid rows on this rank for this M (nothing to compare)"


def no_valid_rows(name: str, rank: int | None = None) -> CheckResult:
    """The skip of value check ``name`` on a rank with no valid row (:data:`NO_VALID_ROWS`)."""
    return skipped(name, NO_VALID_ROWS, rank=rank, per_example=True)


def skipped(name: str, reason: str, rank: int | None = None, *, per_example: bool = False) -> CheckResult:
    """A check not made, with its reason. ``per_example``: skipped because of this example only (e.g. an
    M the implementation waives), so the gate draws another example instead of skipping the test."""
    res = CheckResult(name=name, passed=False, rank=rank, skipped=True, detail=reason)
    if per_example:
        res.extra["per_example"] = True
    return res


def worst_of(name, mask_wrong, err, actual, expected, allowed=None, *, rank=None, row_offset=0, total=None,
             scalars=None):
    """Fill a CheckResult from an elementwise error tensor ``err`` (larger is worse; NaN counts as worst)
    and a boolean mask of wrong elements. ``total`` may be a 0-d tensor and ``scalars`` (name -> 0-d tensor,
    stored in ``extra``) more values of the caller's: everything is reduced where the data is and read back in
    two transfers (counts and the worst element's place, then its values), not one per number -- on a GPU
    that ranks time-slice, every read-back waits for the device."""
    import torch

    n = err.numel()
    counts = [mask_wrong.sum(), mask_wrong.numel() if total is None else total]
    if n:
        # Rank the elements: wrong ones first, then by error (NaN errors as +inf); both places, chosen below.
        score = torch.nan_to_num(err.double(), nan=float("inf"), posinf=float("inf"))
        masked = torch.where(mask_wrong, score, torch.full_like(score, -1.0))
        counts += [torch.isnan(actual).sum(), torch.isinf(actual).sum(),
                   torch.argmax(torch.nan_to_num(masked, posinf=1e308)),
                   torch.argmax(torch.nan_to_num(score, posinf=1e308))]
    names = list(scalars or {})
    read = read_back(counts + [scalars[k] for k in names])
    n_wrong, total_ = int(read[0]), int(read[1])
    res = CheckResult(name=name, passed=n_wrong == 0, rank=rank, total=total_, n_wrong=n_wrong)
    res.extra.update({k: v for k, v in zip(names, read[len(counts):])})
    if not n:
        return res
    res.n_nan, res.n_inf = int(read[2]), int(read[3])
    flat = int(read[4] if n_wrong else read[5])
    idx = tuple(int(i) for i in _unravel(flat, tuple(err.shape)))
    res.worst_index = idx
    res.worst_row = row_offset + idx[0] if err.dim() >= 1 else None
    picks = [actual[idx].double(), expected[idx].double(), err[idx].double()]  # one element each, widened
    has_allowed = allowed is not None and hasattr(allowed, "shape") and allowed.dim()
    if has_allowed:
        picks.append(allowed[idx].double())
    values = read_back(picks)
    res.worst_actual, res.worst_expected, res.worst_error = values[:3]
    if allowed is not None:
        res.allowed = values[3] if has_allowed else float(allowed)
    return res


#: Elements of a shard a check widens to fp64 at once (its error and ranking temporaries, some ten of them; see
#: :func:`in_row_blocks`): a whole 4096 x 8192 shard's held 2.8 GB of a rank, and 16 ranks time-slicing an 80 GB
#: H100 ran out of memory in the tolerance check (36th session). A shard up to this size is one block.
BLOCK_ELEMENTS = 1 << 22


def in_row_blocks(check, n: int, row_elements: int, name: str, rank=None, extra_merge=None) -> CheckResult:
    """``check(start, stop)``, the CheckResult of rows ``start:stop`` (its ``worst_row`` already global, its
    ``worst_index`` relative to ``start``), over blocks of rows of at most :data:`BLOCK_ELEMENTS` elements, merged
    into the result :func:`worst_of` gives for all ``n`` rows at once: counts summed; the worst element the worst
    wrong one (else the worst of all), NaN errors worst, the first block's on a tie (argmax's first place over the
    rows in order), named by its index in the ``n`` rows; each ``extra`` value merged by ``extra_merge[key]``
    (``max``, ``sum``). ``n`` > 0."""
    step = max(1, BLOCK_ELEMENTS // max(1, row_elements))
    blocks = []
    for start in range(0, n, step):
        b = check(start, min(n, start + step))
        if start and b.worst_index is not None:
            b.worst_index = (b.worst_index[0] + start, *b.worst_index[1:])
        blocks.append(b)
    if len(blocks) == 1:
        return blocks[0]
    res = CheckResult(name=name, passed=all(b.passed for b in blocks), rank=rank,
                      total=sum(b.total for b in blocks), n_wrong=sum(b.n_wrong for b in blocks),
                      n_nan=sum(b.n_nan for b in blocks), n_inf=sum(b.n_inf for b in blocks))
    pool = [b for b in blocks if b.n_wrong] or blocks
    worst = max(pool, key=lambda b: math.inf if b.worst_error is None or math.isnan(b.worst_error)
                else b.worst_error)
    for f in ("worst_index", "worst_row", "worst_actual", "worst_expected", "worst_error", "allowed"):
        setattr(res, f, getattr(worst, f))
    for key, merge in (extra_merge or {}).items():
        res.extra[key] = merge(b.extra[key] for b in blocks)
    return res


def read_back(values) -> list[float]:
    """Numbers (0-d tensors, or Python numbers) as floats, read back with one transfer per device: on a GPU
    that ranks time-slice, every read-back waits for the device, so a check reads its numbers at once."""
    import torch

    values = list(values)
    out: list[float | None] = [None] * len(values)
    by_device: dict = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append(i)
        else:
            out[i] = float(v)
    for idx in by_device.values():
        for i, f in zip(idx, torch.stack([values[i].reshape(()).to(torch.float64) for i in idx]).tolist()):
            out[i] = f
    return out


def _unravel(flat: int, shape: tuple) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return list(reversed(out))
