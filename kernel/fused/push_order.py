"""The push kernel's tile order (:mod:`kernel.fused.gemm_rs_push`): which tile a CTA computes at each step.

Written once, as integer arithmetic with no branch, so that the same functions are traced by the kernel (CuTe
DSL ``Int32`` values, ``select`` = ``cutlass.select_``) and enumerated by the CPU tests (Python ``int``,
``select`` = a conditional expression): the tests check the order the GPU runs, not a copy of it.
Standard library only.

Terms, for one call of rank r in a group of W (every rank uses the same order; only the owners rotate):

* ``T`` tiles per shard (shard-local M tiles x N tiles), ``W * T`` tiles in the call, ``G`` persistent CTAs.
* *push stream*: the ``(W-1) * T`` tiles of peers' shards, round ``k`` (shard tile k) major, owner step ``s``
  minor: push ``q`` is shard tile ``q // (W-1)`` of owner ``(r + 1 + q % (W-1)) % W`` (each round visits the
  peers from the next rank on, so at any time the W ranks push to W different owners).
* *own stream*: the ``T`` tiles of r's own shard, in order; own tile ``k`` sums what the peers pushed for k.
* *position*: the place of a tile in the order; CTA ``b`` runs the positions of *slots* ``b, b + G, ...``
  (:func:`slot_position`), so a CTA's positions increase.

The order (:func:`tile_at`): a *lead* of ``A = min(lead, (W-1) * T)`` pushes, then cycles of W positions
(W-1 pushes, then one own tile) while pushes remain, then the remaining pushes, then the remaining own tiles.

* Every own tile comes after every push of its round, on every rank: own tile k's position exceeds the
  position of push ``k * (W-1) + s`` for every ``s`` (tested for all shapes up to a size). This is the
  deadlock-freedom argument of the design record: the smallest position any CTA could wait at forever
  waits only for pushes at smaller positions, which therefore complete.
* With ``lead = G`` (the ``interleaved`` order), own tile k comes at least ``G + 1`` positions -- one wave
  of CTAs -- after the pushes of its round that are in the lead, and ``~G * W/(W-1)`` after the others,
  except the last ``~G/(W-1)`` own tiles (nothing is left to interleave them with). Pushes are spread over
  the whole call instead of its first ``(W-1)/W``: NVLink needs the average rate, not ``W/(W-1)`` times it.
* With ``lead >= (W-1) * T`` (the ``push_first`` order): every push, then every own tile.

:func:`slot_position` with ``rotate`` turns wave ``w``'s positions by ``w`` among its CTAs, so that a CTA
alternates between pushes and own tiles instead of keeping one kind when ``G`` is a multiple of W.
"""

from __future__ import annotations


def python_select(cond, a, b):
    """``select`` for Python integers (the CPU tests)."""
    return a if cond else b


def slot_position(slot, grid, total, rotate: bool, select=python_select):
    """The position a CTA runs at ``slot`` (``bidx + wave * grid``, ``slot < total``): wave ``w`` runs the
    positions ``[w*G, w*G + width)`` (``width = min(G, total - w*G)``), turned by ``w`` among its CTAs when
    ``rotate``; otherwise the slot itself."""
    if not rotate:
        return slot
    wave = slot // grid
    first = wave * grid
    width = select(total - first < grid, total - first, grid)
    return first + (slot - first + wave) % width


def tile_at(position, tiles_per_shard, world_size: int, lead, select=python_select):
    """``(step, k)`` of the tile at ``position``: ``step < W-1``: push shard tile ``k`` to owner
    ``(rank + 1 + step) % W``; ``step == W-1``: own shard tile ``k``. ``world_size`` is a compile-time int."""
    W = world_size
    pushes = (W - 1) * tiles_per_shard
    A = select(lead < pushes, lead, pushes)  # the lead: pushes only
    C = (pushes - A) // (W - 1)  # full cycles of W-1 pushes and one own tile
    R = pushes - A - C * (W - 1)  # pushes left after the cycles
    B = A + C * W  # first position after the cycles
    c = (position - A) // W  # (meaningful inside the cycles only)
    i = position - A - c * W
    q = select(position < A, position, select(position < B, A + c * (W - 1) + i, A + C * (W - 1) + position - B))
    own = ((position >= A) & (position < B) & (i == W - 1)) | (position >= B + R)
    own_k = select(position < B, c, C + position - B - R)
    step = select(own, W - 1, q % (W - 1))
    k = select(own, own_k, q // (W - 1))
    return step, k


__all__ = ["python_select", "slot_position", "tile_at"]
