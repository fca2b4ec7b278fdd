"""Reference (torch GEMM + reduce-scatter), fp64 truth, and deterministic / exact-integer inputs."""

from .inputs import KINDS, all_rank_inputs, exact_nnz, make_inputs, make_w, make_x
from .reference import reference_gemm_rs
from .shards import shard_rows, valid_rows
from .truth import Truth, seeded_shard_truth, shard_truth

__all__ = [
    "KINDS", "Truth", "all_rank_inputs", "exact_nnz", "make_inputs", "make_w", "make_x", "reference_gemm_rs",
    "seeded_shard_truth", "shard_rows", "shard_truth", "valid_rows",
]
