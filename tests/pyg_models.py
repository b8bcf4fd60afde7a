"""Models laid out like real PyTorch Geometric code whose skips live in ``forward`` (shared by
the probe and pruning tests), each with its residual stream computed by hand."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import DeepGCNLayer, GENConv, TransformerConv
from torch_geometric.utils import to_undirected


def small_graph(n: int = 12, channels: int = 5, seed: int = 0) -> Data:
    """A connected float64 graph: a ring plus a few random chords."""
    gen = torch.Generator().manual_seed(seed)
    ring = torch.arange(n)
    chords = torch.randint(0, n, (2, n // 2), generator=gen)
    chords = chords[:, chords[0] != chords[1]]
    edges = torch.cat([torch.stack([ring, (ring + 1) % n]), chords], 1)
    x = torch.randn(n, channels, generator=gen, dtype=torch.float64)
    return Data(x=x, edge_index=to_undirected(edges, num_nodes=n), num_nodes=n)


class PreLNTransformer(nn.Module):
    """Pre-LN graph transformer: ``h = h + conv(norm(h))`` with ``convs`` and ``norms``
    ModuleLists, optionally a final norm and a linear head."""

    def __init__(
        self, channels: int, hidden: int = 8, depth: int = 3, final_norm: bool = False, out=None
    ) -> None:
        super().__init__()
        self.lin_in = nn.Linear(channels, hidden)
        self.convs = nn.ModuleList(
            TransformerConv(hidden, hidden // 2, heads=2) for _ in range(depth)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))
        self.norm_out = nn.LayerNorm(hidden) if final_norm else None
        self.head = nn.Linear(hidden, out) if out else None

    def stream(self, x, edge_index, skip: int | None = None) -> list[torch.Tensor]:
        """The stream before the first block and after each block (block ``skip`` removed)."""
        h = self.lin_in(x)
        states = [h]
        for k, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            if k != skip:
                h = h + conv(norm(h), edge_index)
            states.append(h)
        return states

    def forward(self, x, edge_index):
        h = self.lin_in(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = h + conv(norm(h), edge_index)
        if self.norm_out is not None:
            h = self.norm_out(h)
        return h if self.head is None else self.head(h)


class ConvsNamedBlocks(PreLNTransformer):
    """The same Pre-LN model with its convs in a list named ``blocks``: not blocks whose
    outputs are the stream (the skip and the norm live in forward)."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.blocks = self._modules.pop("convs")

    @property
    def convs(self) -> nn.ModuleList:  # what PreLNTransformer's forward and stream read
        return self.blocks


class TwoNormLists(PreLNTransformer):
    """Norms in two lists paired with the layers (attention and FFN pre-norms): the probe
    cannot tell which one carries the stream."""

    def __init__(self, channels: int, hidden: int = 8, depth: int = 3) -> None:
        super().__init__(channels, hidden, depth)
        self.ffn_norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))
        self.ffns = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(depth))

    def forward(self, x, edge_index):
        h = self.lin_in(x)
        for conv, norm, ffn, ffn_norm in zip(
            self.convs, self.norms, self.ffns, self.ffn_norms, strict=True
        ):
            h = h + conv(norm(h), edge_index)
            h = h + ffn(ffn_norm(h))
        return h


class DeeperGCN(nn.Module):
    """PyG's ``examples/ogbn_proteins_deepgcn.py`` layout (res+ blocks; the forward runs
    ``layers[0].conv`` itself and the other layers whole)."""

    def __init__(self, channels: int, hidden: int = 8, depth: int = 3, out: int = 3) -> None:
        super().__init__()
        self.node_encoder = nn.Linear(channels, hidden)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            conv = GENConv(hidden, hidden, aggr="softmax", t=1.0, learn_t=True, num_layers=2)
            norm = nn.LayerNorm(hidden, elementwise_affine=True)
            act = nn.ReLU(inplace=True)
            self.layers.append(DeepGCNLayer(conv, norm, act, block="res+", dropout=0.1))
        self.lin = nn.Linear(hidden, out)

    def stream(self, x, edge_index) -> list[torch.Tensor]:
        h = self.node_encoder(x)
        states = [h, self.layers[0].conv(h, edge_index)]
        for layer in self.layers[1:]:
            states.append(layer(states[-1], edge_index))
        return states

    def forward(self, x, edge_index):
        x = self.node_encoder(x)
        x = self.layers[0].conv(x, edge_index)
        for layer in self.layers[1:]:
            x = layer(x, edge_index)
        x = self.layers[0].act(self.layers[0].norm(x))
        x = F.dropout(x, p=0.1, training=self.training)
        return self.lin(x)
