"""Coverage plot of a campaign: M classes (columns) x (implementation, topology, W) (rows), each cell
coloured by outcome — green all passed, red any failure, grey not covered — with its case count.
Written as ``coverage.png`` beside the summary (matplotlib, Agg backend; skipped with a reason if
matplotlib is missing)."""

from __future__ import annotations

import os

from .status import Status

M_CLASSES = ("1", "2..W-1", "W", "W+1", "<127", "127-129", "130-254", "255-257", "258-1022", "1023-1025",
             "1026-4096", "4097-8190", "8191+")


def m_class(M: int, W: int) -> str:
    if M == 1:
        return "1"
    if M < W:
        return "2..W-1"
    if M == W:
        return "W"
    if M == W + 1:
        return "W+1"
    for lo, hi, name in ((0, 126, "<127"), (127, 129, "127-129"), (130, 254, "130-254"), (255, 257, "255-257"),
                         (258, 1022, "258-1022"), (1023, 1025, "1023-1025"), (1026, 4096, "1026-4096"),
                         (4097, 8190, "4097-8190")):
        if lo <= M <= hi:
            return name
    return "8191+"


def possible(cls: str, W: int) -> bool:
    """Whether an M class has any M at world size W (``2..W-1`` is empty for W <= 2, ``W``/``W+1`` fall in
    ``1``/``2..W-1`` for W = 1)."""
    return any(m_class(M, W) == cls for M in (1, 2, W - 1, W, W + 1, 100, 128, 200, 256, 500, 1024, 2000, 5000, 9000)
               if M >= 1)


def coverage(cases: list[dict]) -> dict[tuple, dict[str, list[int]]]:
    """(impl, topology, W) -> M class -> [cases, failures]."""
    grid: dict[tuple, dict[str, list[int]]] = {}
    for row in cases:
        if row["case"]["family"] not in ("compute", "graph"):
            continue
        key = (row["impl"], row["topology"], row["world_size"])
        failed = not Status(row["status"]).ok
        for M in row["case"]["ms"]:
            cell = grid.setdefault(key, {}).setdefault(m_class(M, row["world_size"]), [0, 0])
            cell[0] += 1
            cell[1] += failed
    return grid


def plot_coverage(cases: list[dict], path: str) -> str | None:
    """Write the PNG; return None, or the reason it was not written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap
    except ImportError as exc:
        return f"matplotlib not available ({exc})"
    grid = coverage(cases)
    if not grid:
        return "no compute cases recorded"
    rows = sorted(grid)
    data = [[0.0] * len(M_CLASSES) for _ in rows]
    for i, key in enumerate(rows):
        for j, cls in enumerate(M_CLASSES):
            n, f = grid[key].get(cls, (0, 0))
            data[i][j] = 0.0 if n == 0 else (2.0 if f else 1.0)
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(M_CLASSES), 1.2 + 0.45 * len(rows)))
    ax.imshow(data, cmap=ListedColormap(["#d0d0d0", "#4caf50", "#e53935"]), vmin=0, vmax=2, aspect="auto")
    for i, key in enumerate(rows):
        for j, cls in enumerate(M_CLASSES):
            n, f = grid[key].get(cls, (0, 0))
            if n:
                ax.text(j, i, f"{n}" if not f else f"{f}/{n}", ha="center", va="center", fontsize=8)
            elif not possible(cls, key[2]):
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="#707070")
    ax.set_xticks(range(len(M_CLASSES)), M_CLASSES, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{i} {t} W={w}" for i, t, w in rows], fontsize=8)
    ax.set_xlabel("M class (cases; failures/cases in red)")
    ax.set_title("GEMM-RS gate coverage: green passed, red failed, grey not covered (n/a: no such M at this W)",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
