"""The one collective the unfused path needs, on whatever backend the group has.

NCCL reduce-scatters device tensors in place (and is CUDA-graph capturable). Gloo reduce-scatters
CPU tensors only: device tensors are staged through preallocated host buffers, which is correct but
not capturable — :func:`is_capturable` says so and the suite skips graph clauses with that reason.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def backend_of(group) -> str:
    if not (dist.is_available() and dist.is_initialized()):
        return "none"
    return str(dist.get_backend(group)).lower()


def needs_host_staging(group, device: torch.device) -> bool:
    return device.type != "cpu" and backend_of(group) == "gloo"


def is_capturable(group, device: torch.device) -> bool:
    return device.type == "cuda" and backend_of(group) == "nccl"


def reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group=None, staging=None) -> None:
    """``out = (sum over ranks of inp)[rank * len(out) : (rank + 1) * len(out)]``.

    ``staging``: optional (host_in, host_out) buffers at least as large as inp/out, for gloo with
    device tensors. A world of one (or no process group) is a copy.
    """
    if backend_of(group) == "none" or dist.get_world_size(group) == 1:
        out.copy_(inp[: out.shape[0]])
        return
    if needs_host_staging(group, inp.device):
        host_in, host_out = staging if staging is not None else (None, None)
        host_in = inp.cpu() if host_in is None else host_in.view(-1)[: inp.numel()].view_as(inp).copy_(inp)
        host_out = (
            torch.empty(out.shape, dtype=out.dtype, device="cpu")
            if host_out is None
            else host_out.view(-1)[: out.numel()].view_as(out)
        )
        _reduce_scatter(host_out, host_in, group=group)
        out.copy_(host_out)
        return
    _reduce_scatter(out, inp, group=group)
