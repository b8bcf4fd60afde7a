"""The blocks between encoder and decoder (seed paper §3.1, Figure 3).

- ``preln``:  ``Y = X + MP(Norm(X))``;  ``X' = Y + FFN(Norm(Y))``
- ``postln``: ``Y = Norm(X + MP(X))``;  ``X' = Norm(Y + FFN(Y))``
- ``plain``:  ``X' = act(MP(X))`` (no residual, no LayerNorm: the textbook oversmoothing stack)

``nonlocal`` and ``nonlocal-preln`` are ``postln`` and ``preln`` whose MP is
nonlocal (each head scaled by its Laplacian energy).
"""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from oversmooth.graph import by_rows
from oversmooth.nn.conv import GraphContext, MultiHeadMessagePassing
from oversmooth.nn.kernel import records
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
    go through in blocks of :data:`FFN_BLOCK_VALUES` hidden values written into one output, and
    the ``[n, ffn]`` array is never formed.  Each row's numbers are those of the whole to
    rounding (a product over fewer rows may take another BLAS kernel; at the default block size
    they were equal bit for bit on the CPU)."""

    def __init__(self, channels: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__(
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, channels),
        )

    @property
    def block_rows(self) -> int:
        """Rows per block when the FFN runs blockwise (:data:`FFN_BLOCK_VALUES` hidden values)."""
        first = cast(nn.Linear, self[0])
        return max(1, FFN_BLOCK_VALUES // first.out_features)

    def forward(self, x: Tensor) -> Tensor:
        rows = self.block_rows
        if x.size(0) <= rows or not self.blockwise(x):
            return super().forward(x)
        return by_rows(super().forward, x, rows)

    def blockwise(self, x: Tensor) -> bool:
        """Whether the FFN may run on blocks of ``x``'s rows: evaluation mode, autograd records
        nothing, and no hook sits on a sublayer."""
        return not (self.training or hooked(*self) or _records(x, self))

    def add_into_(self, y: Tensor, norm: LayerNorm | None = None) -> Tensor:
        """``y + FFN(norm(y))`` (``norm`` optional, node statistics) written over ``y`` a block of
        rows at a time: the residual sum (to rounding, as :meth:`forward` over blocks), without
        the FFN's ``[n, d]`` output (nor the normalised ``[n, d]`` input).  Only for an array
        ``y`` the caller owns, where :meth:`blockwise` holds and no hook sits on the FFN (nor
        on ``norm``)."""
        rows = self.block_rows
        for start in range(0, y.size(0), rows):
            part = y[start : start + rows]
            part.add_(super().forward(part if norm is None else norm(part)))
        return y


#: Post-LN blocks normalise their residual sums in place, this many rows at a time, when
#: there are more rows and autograd records nothing (:meth:`Block._normalise`).
NORM_BLOCK_ROWS = 1 << 16


def _records(x: Tensor, module: nn.Module) -> bool:
    """Whether autograd would record an operation of ``module`` on ``x``."""
    return records(x, *module.parameters())


def hooked(*modules: nn.Module) -> bool:
    """Whether a forward hook or pre-hook sits on one of ``modules``, or on every module (a
    global one): what such a hook returns or reads must be what the module computes whole."""
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def _row_norm(norm: nn.Module) -> bool:
    """Whether ``norm`` is the zoo's LayerNorm with node statistics (each row on its own)."""
    return type(norm) is LayerNorm and norm.mode == "node"


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
            if self._fused_ffn(y, ctx):  # y is the block's own residual sum
                return self.ffn.add_into_(y, self.norm2)
            return self._residual(self.ffn, self.ffn(self.norm2(y, b, g)), y)
        if self.placement == "postln":
            y = self._normalise(self.norm1, self._residual(self.mp, self.mp(x, ctx), x), ctx)
            if self.ffn is None:
                return y
            if self._fused_ffn(y, ctx):  # y is norm1's new output (or the sum it overwrote)
                return self._normalise(self.norm2, self.ffn.add_into_(y), ctx)
            total = self._residual(self.ffn, self.ffn(y), y)
            del y  # not alive beside the normalised output: one [n, d] array less at the peak
            return self._normalise(self.norm2, total, ctx)
        return self.act(self.mp(x, ctx))

    def _fused_ffn(self, y: Tensor, ctx: GraphContext) -> bool:
        """Whether the FFN sublayer and its residual sum run fused over blocks of rows
        (:meth:`FFN.add_into_`): more rows than a block, the zoo's own FFN and node-statistics
        LayerNorms, no hook on any of them (nor a global one), no autograd, evaluation mode."""
        ffn = self.ffn
        if type(ffn) is not FFN or y.size(0) <= ffn.block_rows or not ffn.blockwise(y):
            return False
        norms = (self.norm1, self.norm2)
        return all(_row_norm(m) for m in norms) and not hooked(ffn, *norms)

    @staticmethod
    def _normalise(norm: LayerNorm, total: Tensor, ctx: GraphContext) -> Tensor:
        """``norm(total)`` for a residual sum ``total`` of this block's own: with node
        statistics, when autograd records nothing and no hook sits on ``norm``, written over
        ``total`` a block of rows at a time (each row is normalised on its own: the same
        numbers to rounding, one ``[n, d]`` array less)."""
        small = total.size(0) <= NORM_BLOCK_ROWS
        if small or not _row_norm(norm) or hooked(norm) or _records(total, norm):
            return norm(total, ctx.batch, ctx.num_graphs)
        for start in range(0, total.size(0), NORM_BLOCK_ROWS):
            rows = total[start : start + NORM_BLOCK_ROWS]
            rows.copy_(norm(rows))
        return total

    @staticmethod
    def _residual(sublayer: nn.Module, out: Tensor, skip: Tensor) -> Tensor:
        """``skip + out``, the residual sum: added into ``out`` when it is known to be a new
        array of the sublayer's own (the zoo's :class:`MultiHeadMessagePassing` or
        :class:`FFN`, without hooks, which could hand back another tensor); the same numbers
        (an addition is commutative), one ``[n, d]`` array less.  Autograd allows it: both
        sublayers end in a product whose backward does not read its output."""
        own = type(sublayer) in (MultiHeadMessagePassing, FFN) and not hooked(sublayer)
        if own and out.shape == skip.shape and out.dtype == skip.dtype:
            return out.add_(skip)
        return skip + out

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}"
