"""The blocks between encoder and decoder (seed paper §3.1, Figure 3).

- ``preln``:  ``Y = X + MP(Norm(X))``;  ``X' = Y + FFN(Norm(Y))``
- ``postln``: ``Y = Norm(X + MP(X))``;  ``X' = Norm(Y + FFN(Y))``
- ``plain``:  ``X' = act(MP(X))`` (no residual, no LayerNorm: the textbook oversmoothing stack)

``nonlocal`` and ``nonlocal-preln`` are ``postln`` and ``preln`` whose MP is
nonlocal (each head scaled by its Laplacian energy).
"""

from __future__ import annotations

from torch import Tensor, nn

from oversmooth.nn.conv import GraphContext, MultiHeadMessagePassing
from oversmooth.nn.norm import LayerNorm

PLACEMENTS = ("preln", "postln", "plain")


class FFN(nn.Sequential):
    """Two-layer MLP ``d -> ffn -> d`` with ReLU.

    The ReLU works in place on the first projection's output (its own temporary, which
    autograd does not need: a Linear's backward reads its input): one ``[n, ffn]`` array
    less while the FFN runs, 512 MiB in float64 at 10^6 nodes and ``ffn = 64``."""

    def __init__(self, channels: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__(
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, channels),
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
            y = x + self.mp(self.norm1(x, b, g), ctx)
            return y if self.ffn is None else y + self.ffn(self.norm2(y, b, g))
        if self.placement == "postln":
            y = self.norm1(x + self.mp(x, ctx), b, g)
            return y if self.ffn is None else self.norm2(y + self.ffn(y), b, g)
        return self.act(self.mp(x, ctx))

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}"
