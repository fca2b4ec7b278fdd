"""Run on every rank of a gloo group by ``_dist.run_ranks`` for the numerics tests (test_bias.py,
test_batch_invariance.py): the correct implementation and the numerics mutants of mutants/catalogue.py
on the inputs the gate draws, every check's verdict sent back for the test to judge. Not a test module:
no ``assert``; every rank makes the same calls (hence the same collectives) in the same order.
"""

from __future__ import annotations

from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import BiasedRounding, BiasedRoundingHalfAway, PositionDependentRow, ScaleError
from oracle import all_rank_inputs, shard_truth
from properties import within_tolerance
from properties.batch_invariance import batch_invariant, invariance_inputs
from properties.bias import no_systematic_bias, rounding_model

IMPLEMENTATIONS = {
    "unfused": UnfusedGemmRs,
    "BiasedRounding": BiasedRounding,
    "BiasedRoundingHalfAway": BiasedRoundingHalfAway,
    "ScaleError": ScaleError,
    "PositionDependentRow": PositionDependentRow,
}


def _verdict(res) -> dict:
    return {"passed": bool(res.passed), "skipped": res.skipped, "render": res.render()}


def numerics_checks(rank: int, world_size: int, *, N: int, K: int, M_a: int, M_b: int, seed: int, kind: str):
    """Per implementation: no_systematic_bias and within_tolerance of a call at M_a, and batch_invariant
    between calls at M_a and M_b (tokens kept in each rank's shard)."""
    inputs = all_rank_inputs(seed, M_a, N, K, world_size, kind)
    x, w = inputs[rank]
    model = rounding_model(inputs, rank, M_a)
    truth = shard_truth(inputs, rank, M_a)
    inv = invariance_inputs(seed, rank, M_a, M_b, N, K, world_size, kind)
    info = {}
    for name, cls in IMPLEMENTATIONS.items():
        impl = cls(None, max_M=max(M_a, M_b), N=N, K=K)
        y = impl(x, w)
        y_a, y_b = impl(inv.x_a, inv.w), impl(inv.x_b, inv.w)
        info[name] = {
            "no_systematic_bias": _verdict(no_systematic_bias(y, model, rank=rank)),
            "within_tolerance": _verdict(within_tolerance(y, truth, rank=rank)),
            "batch_invariant": _verdict(batch_invariant(y_a, y_b, inv.row_map, rank=rank, world_size=world_size,
                                                        exact=kind == "exact")),
        }
    return [], info
