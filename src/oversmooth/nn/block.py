"""The blocks between encoder and decoder (seed paper §3.1, Figure 3).

- ``preln``:  ``Y = X + MP(Norm(X))``;  ``X' = Y + FFN(Norm(Y))``
- ``postln``: ``Y = Norm(X + MP(X))``;  ``X' = Norm(Y + FFN(Y))``
- ``plain``:  ``X' = act(MP(X))`` (no residual, no LayerNorm: the textbook oversmoothing stack)

``nonlocal`` and ``nonlocal-preln`` are ``postln`` and ``preln`` whose MP is
nonlocal (each head scaled by its Laplacian energy).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from oversmooth.nn.conv import GraphContext, MultiHeadMessagePassing
from oversmooth.nn.norm import LayerNorm

PLACEMENTS = ("preln", "postln", "plain")


#: Without autograd and in evaluation mode, :class:`FFN` runs on blocks of rows when its
#: hidden array would exceed this many values (32 MiB of float64).
FFN_BLOCK_VALUES = 1 << 22


class FFN(nn.Sequential):
    """Two-layer MLP ``d -> ffn -> d`` with ReLU.

    The ReLU works in place on the first projection's output (its own temporary, which
    autograd does not need: a Linear's backward reads its input): one ``[n, ffn]`` array
    less while the FFN runs, 512 MiB in float64 at 10^6 nodes and ``ffn = 64``.  When autograd
    records nothing, the model is in evaluation mode and no hook sits on the sublayers, rows
    go through in blocks of :data:`FFN_BLOCK_VALUES` hidden values written into one output:
    each row's numbers are those of the whole, and the ``[n, ffn]`` array is never formed."""

    def __init__(self, channels: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__(
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, channels),
        )

    def forward(self, x: Tensor) -> Tensor:
        first, last = self[0], self[-1]
        rows = max(1, FFN_BLOCK_VALUES // first.out_features)
        if x.size(0) <= rows or not self._blockwise(x):
            return super().forward(x)
        out = x.new_empty(x.size(0), last.out_features)
        for start in range(0, x.size(0), rows):
            out[start : start + rows] = super().forward(x[start : start + rows])
        return out

    def _blockwise(self, x: Tensor) -> bool:
        if self.training or any(m._forward_hooks or m._forward_pre_hooks for m in self):
            return False
        return not (
            torch.is_grad_enabled()
            and (x.requires_grad or any(p.requires_grad for p in self.parameters()))
        )


class Block(nn.Module):
    """One block; ``placement`` is ``"preln"``, ``"postln"`` or ``"plain"``."""

    def __init__(
        self,
        placement: str,
        mp: MultiHeadMessagePassing,
        ffn_channels: int,
        norm: str = "node",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(
                f"placement: expected one of {', '.join(PLACEMENTS)}, received {placement!r}"
            )
        self.placement = placement
        self.mp = mp
        if placement != "plain":
            d = mp.channels
            self.norm1, self.norm2 = LayerNorm(d, norm), LayerNorm(d, norm)
            # ffn_channels == 0: no FFN sublayer (an ablation; the block is attention only)
            self.ffn = FFN(d, ffn_channels, dropout) if ffn_channels else None
        self.act = nn.ReLU()

    def forward(self, x: Tensor, ctx: GraphContext) -> Tensor:
        b, g = ctx.batch, ctx.num_graphs
        if self.placement == "preln":
            y = self._residual(self.mp, self.mp(self.norm1(x, b, g), ctx), x)
            if self.ffn is None:
                return y
            return self._residual(self.ffn, self.ffn(self.norm2(y, b, g)), y)
        if self.placement == "postln":
            y = self.norm1(self._residual(self.mp, self.mp(x, ctx), x), b, g)
            if self.ffn is None:
                return y
            total = self._residual(self.ffn, self.ffn(y), y)
            del y  # not alive beside the normalised output: one [n, d] array less at the peak
            return self.norm2(total, b, g)
        return self.act(self.mp(x, ctx))

    @staticmethod
    def _residual(sublayer: nn.Module, out: Tensor, skip: Tensor) -> Tensor:
        """``skip + out``, the residual sum: added into ``out`` when it is known to be a new
        array of the sublayer's own (the zoo's :class:`MultiHeadMessagePassing` or
        :class:`FFN`, without hooks, which could hand back another tensor); the same numbers
        (an addition is commutative), one ``[n, d]`` array less.  Autograd allows it: both
        sublayers end in a product whose backward does not read its output."""
        own = type(sublayer) in (MultiHeadMessagePassing, FFN) and not (
            sublayer._forward_hooks or nn.modules.module._global_forward_hooks
        )
        if own and out.shape == skip.shape and out.dtype == skip.dtype:
            return out.add_(skip)
        return skip + out

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}"
