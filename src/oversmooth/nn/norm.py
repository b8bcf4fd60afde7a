"""LayerNorm over node features in two modes.

``mode="node"``: one mean and variance per node, over its channels (the usual
transformer LayerNorm; equals ``torch.nn.LayerNorm``).
``mode="graph"``: one mean and variance per graph, over all its nodes and all
channels; with a ``batch`` vector every graph of a mini-batch is normalised on
its own.  Affine ``gamma = 1``, ``beta = 0`` at initialisation, ``eps = 1e-5``,
biased variance as in Ba et al. (2016).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oversmooth.registry import NORMS

NORM_MODES = NORMS  # the registry of modes (name -> help)


def resolve_norm_mode(mode: str) -> str:
    return NORMS.resolve(mode)


class LayerNorm(nn.Module):
    """LayerNorm with ``node`` or ``graph`` statistics.

    Args:
        channels: feature size ``d``.
        mode: ``"node"`` (default) or ``"graph"``.
        eps: added to the variance.
        affine: learnable ``gamma`` (init 1) and ``beta`` (init 0) of shape ``[d]``.

    Shapes:
        ``x``: ``[num_nodes, d]``; ``batch``: ``[num_nodes]`` graph ids (graph mode only).
    """

    def __init__(
        self, channels: int, mode: str = "node", eps: float = 1e-5, affine: bool = True
    ) -> None:
        super().__init__()
        self.channels = channels
        self.mode = resolve_norm_mode(mode)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(channels)) if affine else None

    def forward(
        self, x: Tensor, batch: Tensor | None = None, num_graphs: int | None = None
    ) -> Tensor:
        if self.mode == "node":
            return F.layer_norm(x, (self.channels,), self.weight, self.bias, self.eps)
        if batch is None:
            mean = x.mean()
            var = (x - mean).pow(2).mean()
            out = (x - mean) / (var + self.eps).sqrt()
        else:
            if num_graphs is None:
                num_graphs = int(batch.max()) + 1 if batch.numel() else 0
            count = torch.zeros(num_graphs, dtype=x.dtype, device=x.device)
            count.index_add_(0, batch, torch.full_like(batch, x.size(1), dtype=x.dtype))
            count = count.clamp_min(1)
            mean = (
                torch.zeros(num_graphs, dtype=x.dtype, device=x.device).index_add_(
                    0, batch, x.sum(1)
                )
                / count
            )
            centred = x - mean[batch].unsqueeze(1)
            var = (
                torch.zeros(num_graphs, dtype=x.dtype, device=x.device).index_add_(
                    0, batch, centred.pow(2).sum(1)
                )
                / count
            )
            out = centred / (var[batch] + self.eps).sqrt().unsqueeze(1)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight + self.bias
        return out

    def extra_repr(self) -> str:
        return f"{self.channels}, mode={self.mode!r}, eps={self.eps}"
