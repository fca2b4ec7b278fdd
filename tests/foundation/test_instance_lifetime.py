"""A rank's long-lived instances are closed every INSTANCE_LIFETIME_CASES cases, all of them, in the order of
their keys (closing is collective on an instance's group: one global order cannot deadlock), so a pool does not
keep an instance of every shape it ever drew (on an H200 four pools per GPU ran out of memory that way)."""

from __future__ import annotations

import torch

from fuzz.case import Case
from fuzz.families.context import INSTANCE_LIFETIME_CASES, RankContext


class Recorder:
    closed: list = []

    def __init__(self, group=None, *, max_M, N, K, device):
        self.key = (max_M, N, K)

    def close(self):
        Recorder.closed.append(self.key)


def test_instances_are_closed_in_key_order_every_lifetime():
    Recorder.closed = []
    ctx = RankContext(Recorder, rank=0, world_size=1, device=torch.device("cpu"))
    shapes = [(64, 128, 64), (32, 64, 64), (64, 64, 128)]
    for i in range(INSTANCE_LIFETIME_CASES - 1):
        ctx.begin_case()
        max_M, N, K = shapes[i % len(shapes)]
        ctx.impl(Case("compute", seed=i, N=N, K=K, max_M=max_M, ms=[1]))
    assert Recorder.closed == [] and len(ctx._impls) == len(shapes)  # alive across cases, one per shape
    ctx.begin_case()  # the lifetime's last case starts: everything held is closed first
    assert Recorder.closed == sorted(Recorder.closed) and len(Recorder.closed) == len(shapes)
    assert ctx._impls == {}
    ctx.impl(Case("compute", seed=0, N=64, K=64, max_M=32, ms=[1]))
    assert len(ctx._impls) == 1  # a new instance after the reset
