"""The measured ``should_run`` crossover: from which M the fused kernel beats torch mm + NCCL reduce-scatter,
per (N, K, W, protocol). ``bench/bench_gemm_rs.py --write-crossover`` measures it on a multi-GPU host (one
GPU per rank; ranks sharing a GPU time-slice it, so no crossover can be measured there) and writes
``crossover.json`` next to this module; :class:`kernel.fused.FusedGemmRs` reads it at construction. A
(N, K, W, protocol) the table does not name keeps the contract default (M >= 128).

Entry: ``{"N", "K", "W", "protocol", "min_m", "measured", "machine", "command"}``; ``min_m`` is the smallest
measured M from which fused was faster at every larger measured M too, or null when it never was
(``should_run`` is then false for every M: the unfused path pays everywhere measured).

Protocol entry (the table's ``protocols`` list, for the wrapper's ``protocol="auto"``): ``{"N", "K", "W",
"by_m", "measured", "machine", "command"}``; ``by_m`` maps each measured M (a string, JSON keys are) to the
faster protocol there, ``"pull"`` or ``"push"``. A call with M rows uses the protocol of the largest
measured M <= M (of the smallest measured M below them all): :func:`protocol_for`, a pure function of M.
"""

from __future__ import annotations

import json
import os

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crossover.json")
#: should_run's threshold when the table says fused never paid off in the measured range.
NEVER = 1 << 31


def _read(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


def load_table(path: str = TABLE_PATH) -> list[dict]:
    """The entries of the crossover table (none when the file does not exist)."""
    entries = _read(path).get("entries", [])
    for e in entries:
        missing = {"N", "K", "W", "protocol", "min_m"} - set(e)
        if missing:
            raise ValueError(f"{path}: entry {e} lacks {sorted(missing)}")
    return entries


def load_protocols(path: str = TABLE_PATH) -> list[dict]:
    """The protocol entries of the table (none when the file does not exist)."""
    entries = _read(path).get("protocols", [])
    for e in entries:
        missing = {"N", "K", "W", "by_m"} - set(e)
        if missing:
            raise ValueError(f"{path}: protocol entry {e} lacks {sorted(missing)}")
        bad = sorted({p for p in e["by_m"].values() if p not in ("pull", "push")})
        if bad or not e["by_m"]:
            raise ValueError(f"{path}: protocol entry {e} names no protocol or unknown ones {bad}")
    return entries


def measured_protocols(N: int, K: int, world_size: int, path: str = TABLE_PATH) -> dict[int, str] | None:
    """``{M: faster protocol}`` measured for (N, K, W), or None when the table has no such entry."""
    for e in load_protocols(path):
        if (e["N"], e["K"], e["W"]) == (N, K, world_size):
            return {int(m): p for m, p in e["by_m"].items()}
    return None


def protocol_for(M: int, by_m: dict[int, str]) -> str:
    """The protocol of the largest measured M' <= M (or of the smallest measured M, below them all)."""
    below = [m for m in by_m if m <= M]
    return by_m[max(below) if below else min(by_m)]


def faster_protocol_by_m(timings: dict[int, tuple[float, float]]) -> dict[int, str]:
    """``{M: (pull_s, push_s)}`` -> ``{M: the faster protocol}`` (pull, the proven one, on a tie)."""
    return {M: "push" if push_s < pull_s else "pull" for M, (pull_s, push_s) in sorted(timings.items())}


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


def write_entries(new: list[dict], path: str = TABLE_PATH, protocols: list[dict] = ()) -> None:
    """Merge ``new`` crossover entries (replacing those with the same (N, K, W, protocol)) and ``protocols``
    entries (replacing those with the same (N, K, W)) into the table."""
    keys = {(e["N"], e["K"], e["W"], e["protocol"]) for e in new}
    kept = [e for e in load_table(path) if (e["N"], e["K"], e["W"], e["protocol"]) not in keys]
    entries = sorted(kept + list(new), key=lambda e: (e["protocol"], e["W"], e["N"], e["K"]))
    pkeys = {(e["N"], e["K"], e["W"]) for e in protocols}
    pkept = [e for e in load_protocols(path) if (e["N"], e["K"], e["W"]) not in pkeys]
    by = sorted(pkept + [dict(e, by_m={str(m): p for m, p in e["by_m"].items()}) for e in protocols],
                key=lambda e: (e["W"], e["N"], e["K"]))
    with open(path, "w") as f:
        json.dump({"about": __doc__.splitlines()[0], "entries": entries, "protocols": by}, f, indent=1)
        f.write("\n")


__all__ = ["NEVER", "TABLE_PATH", "crossover_from_timings", "faster_protocol_by_m", "load_protocols", "load_table",
           "measured_min_m", "measured_protocols", "protocol_for", "write_entries"]
