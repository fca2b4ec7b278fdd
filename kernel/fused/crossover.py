"""The measured ``should_run`` crossover: from which M the fused kernel beats torch mm + NCCL reduce-scatter,
per (N, K, W, protocol). ``bench/bench_gemm_rs.py --write-crossover`` measures it on a multi-GPU host (one
GPU per rank; ranks sharing a GPU time-slice it, so no crossover can be measured there) and writes
``crossover.json`` next to this module; :class:`kernel.fused.FusedGemmRs` reads it at construction. A
(N, K, W, protocol) the table does not name keeps the contract default (M >= 128).

Entry: ``{"N", "K", "W", "protocol", "min_m", "measured", "machine", "command"}``; ``min_m`` is the smallest
measured M from which fused was faster at every larger measured M too, or null when it never was
(``should_run`` is then false for every M: the unfused path pays everywhere measured).
"""

from __future__ import annotations

import json
import os

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crossover.json")
#: should_run's threshold when the table says fused never paid off in the measured range.
NEVER = 1 << 31


def load_table(path: str = TABLE_PATH) -> list[dict]:
    """The entries of the crossover table (none when the file does not exist)."""
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        table = json.load(f)
    entries = table.get("entries", [])
    for e in entries:
        missing = {"N", "K", "W", "protocol", "min_m"} - set(e)
        if missing:
            raise ValueError(f"{path}: entry {e} lacks {sorted(missing)}")
    return entries


def measured_min_m(N: int, K: int, world_size: int, protocol: str, default: int, path: str = TABLE_PATH) -> int:
    """``should_run``'s threshold for (N, K, W, protocol): the measured crossover if the table has one,
    ``NEVER`` if it measured no crossover, else ``default``."""
    for e in load_table(path):
        if (e["N"], e["K"], e["W"], e["protocol"]) == (N, K, world_size, protocol):
            return NEVER if e["min_m"] is None else int(e["min_m"])
    return default


def crossover_from_timings(timings: dict[int, tuple[float, float]]) -> int | None:
    """``{M: (fused_s, unfused_s)}`` -> the smallest M from which fused is faster at that M and every larger
    measured M (so one noisy small M does not switch the dispatch back and forth); None if never."""
    best = None
    for M in sorted(timings, reverse=True):
        fused_s, unfused_s = timings[M]
        if fused_s >= unfused_s:
            break
        best = M
    return best


def write_entries(new: list[dict], path: str = TABLE_PATH) -> None:
    """Merge ``new`` entries into the table (replacing those with the same (N, K, W, protocol))."""
    keys = {(e["N"], e["K"], e["W"], e["protocol"]) for e in new}
    kept = [e for e in load_table(path) if (e["N"], e["K"], e["W"], e["protocol"]) not in keys]
    entries = sorted(kept + list(new), key=lambda e: (e["protocol"], e["W"], e["N"], e["K"]))
    with open(path, "w") as f:
        json.dump({"about": __doc__.splitlines()[0], "entries": entries}, f, indent=1)
        f.write("\n")


__all__ = ["NEVER", "TABLE_PATH", "crossover_from_timings", "load_table", "measured_min_m", "write_entries"]
