"""Planted-bug implementations of the contract: each models one real bug class of fused communication
kernels. The suite must fail on every one of them (the mutation meta-test) and pass on the correct
implementation. Load one by spec, e.g. ``--impl mutants.catalogue:DroppedRankOddM``."""
