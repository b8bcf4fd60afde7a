"""PyTorch Geometric's deep-GNN building blocks, assembled as their documentation and examples
do, for the atlas (:mod:`oversmooth.experiments.atlas`).

Every entry of :data:`ZOO` builds one architecture from PyG's own classes at a given depth and
seed and says how it was configured (:attr:`ZooEntry.configuration`), how the
:class:`~oversmooth.probe.Probe` reads its layers and whether a layer can be pruned.  Choices
that hold for all of them:

- width :data:`HIDDEN` (64, the width of PyG's GCNII, GPS and DeeperGCN examples) between an
  input map and, where the example has one, a linear classification head; the zoo's own models
  keep their defaults (width 32, 4 heads: the seed paper's);
- ``eval()`` mode (every dropout off, whatever its rate): the forward at initialisation is
  deterministic, as in every oversmooth analysis.  A BatchNorm in eval mode at
  initialisation (GPS) is the identity up to ``1/sqrt(1 + eps)``: its running statistics are
  still 0 and 1;
- float64 parameters (drawn in float32 by PyG's own initialisers, then cast), so that deep
  energies are not at the float32 floor;
- parameters are drawn layer after layer from one seeded generator (``torch.random.fork_rng``,
  the global generator is left as it was), so the first ``d`` layers of a deeper stack are the
  depth-``d`` stack of the same seed (tested for every entry): one forward at the deepest depth
  gives the final energy of every shallower depth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from oversmooth.probe import Probe

__all__ = ["HIDDEN", "ZOO", "ZooEntry", "build", "zoo_entry", "APPNPNet", "GCNII", "GPS"]

HIDDEN = 64  # width of the PyG models (their examples' hidden_channels)
HEADS = 4  # attention heads of the transformer and GPS stacks (PyG's GPS example)
GAT_HEADS = 8  # PyG's GAT example: 8 heads of 8 channels


@dataclass(frozen=True)
class ZooEntry:
    """One architecture of the atlas.

    ``build(in_channels, classes, depth)`` returns the model (parameters drawn from the current
    global generator; :func:`build` seeds it).  ``capture`` and ``stream`` are what the
    :class:`~oversmooth.probe.Probe` and :func:`~oversmooth.prune.prune_sensitivity` need
    (``stream(model)`` gives the modules whose input is the residual stream).  ``native``: an
    oversmooth :class:`~oversmooth.nn.DepthModel`, probed by
    :func:`~oversmooth.analysis.probe_run` with its own float-floor estimate.  ``prunable``:
    the model has one module per layer (APPNP's propagation steps are not modules).
    """

    key: str
    name: str
    classes: str  # the PyG classes it is built from
    configuration: str  # how, in one line
    build: Callable[[int, int, int], nn.Module]
    capture: str = "output"
    stream: Callable[[Any], list[nn.Module]] | None = None
    native: bool = False
    prunable: bool = True


# ----------------------------------------------------------------------------- models


class GCNII(nn.Module):
    """PyG's ``examples/gcn2_cora.py``: ``x = x_0 = relu(lins[0](x))``, then ``num_layers``
    ``GCN2Conv`` layers (initial residual ``alpha``, identity mapping ``theta``, shared
    weights), each followed by ReLU, and ``lins[1]`` as the head.  The example normalises the
    graph once with ``GCNNorm`` (symmetric, self loops); here each conv does the same
    normalisation itself (``normalize=True``)."""

    def __init__(
        self, in_channels: int, classes: int, depth: int, alpha: float = 0.1, theta: float = 0.5
    ) -> None:
        from torch_geometric.nn import GCN2Conv

        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(in_channels, HIDDEN)])
        self.convs = nn.ModuleList(
            GCN2Conv(HIDDEN, alpha, theta, layer + 1, shared_weights=True) for layer in range(depth)
        )
        self.lins.append(nn.Linear(HIDDEN, classes))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = x_0 = self.lins[0](x).relu()
        for conv in self.convs:
            x = conv(x, x_0, edge_index).relu()
        out: Tensor = self.lins[1](x)
        return out


class APPNPNet(nn.Module):
    """PyG's ``benchmark/citation/appnp.py``: ``lin2(relu(lin1(x)))`` gives class scores ``h``,
    then ``APPNP(K=depth, alpha=0.1)`` propagates them: ``x <- (1 - alpha) P x + alpha h``.

    The propagation steps are not modules, so :meth:`record_steps` reads them: step ``k``'s
    state is rebuilt from the propagated ``P x`` (a propagate hook) with APPNP's own two
    operations in its own order, bit for bit the state its loop carries on."""

    def __init__(self, in_channels: int, classes: int, depth: int, alpha: float = 0.1) -> None:
        from torch_geometric.nn import APPNP

        super().__init__()
        self.lin1 = nn.Linear(in_channels, HIDDEN)
        self.lin2 = nn.Linear(HIDDEN, classes)
        self.prop1 = APPNP(K=depth, alpha=alpha)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = self.lin2(self.lin1(x).relu())
        out: Tensor = self.prop1(x, edge_index)
        return out

    def record_steps(self, probe: Probe) -> Callable[[], None]:
        """Record the state after every propagation step into ``probe`` (layer 0: ``h``);
        returns the function that removes the hooks."""
        alpha = self.prop1.alpha
        seen: dict[str, Any] = {}

        def start(module: nn.Module, args: tuple) -> None:
            seen["h"], seen["k"] = args[0], 0
            probe.record(0, args[0])

        def step(module: nn.Module, inputs: tuple, output: Tensor) -> None:
            x = output * (1 - alpha)
            x = x + alpha * seen["h"]
            seen["k"] += 1
            probe.record(seen["k"], x)

        handles = [
            self.prop1.register_forward_pre_hook(start),
            self.prop1.register_propagate_forward_hook(step),
        ]

        def remove() -> None:
            for handle in handles:
                handle.remove()

        return remove


class DeeperGCN(nn.Module):
    """PyG's ``examples/ogbn_proteins_deepgcn.py`` (res+ ``DeepGCNLayer`` blocks over
    ``GENConv`` with softmax aggregation and a learnable temperature, LayerNorm, ReLU); the
    forward runs ``layers[0].conv`` itself and the other layers whole, as the example does.
    Cora has no edge features, so there is no edge encoder."""

    def __init__(self, in_channels: int, classes: int, depth: int) -> None:
        from torch_geometric.nn import DeepGCNLayer, GENConv

        super().__init__()
        self.node_encoder = nn.Linear(in_channels, HIDDEN)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            conv = GENConv(
                HIDDEN, HIDDEN, aggr="softmax", t=1.0, learn_t=True, num_layers=2, norm="layer"
            )
            norm = nn.LayerNorm(HIDDEN, elementwise_affine=True)
            act = nn.ReLU(inplace=True)
            self.layers.append(DeepGCNLayer(conv, norm, act, block="res+", dropout=0.1))
        self.lin = nn.Linear(HIDDEN, classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        first: Any = self.layers[0]  # a DeepGCNLayer: its conv, norm and act
        x = self.node_encoder(x)
        x = first.conv(x, edge_index)
        for layer in self.layers[1:]:
            x = layer(x, edge_index)
        x = first.act(first.norm(x))
        out: Tensor = self.lin(x)
        return out


class GPS(nn.Module):
    """PyG's ``examples/graph_gps.py``: ``GPSConv(64, GINEConv(MLP), heads=4,
    attn_type="multihead")`` layers over a node embedding.  Cora has no edge features, so the
    local MPNN is ``GINConv`` over the same two-layer MLP, and the embedding is a linear map of
    the features; a linear head replaces the example's regression MLP."""

    def __init__(self, in_channels: int, classes: int, depth: int) -> None:
        from torch_geometric.nn import GINConv, GPSConv

        super().__init__()
        self.node_emb = nn.Linear(in_channels, HIDDEN)
        self.convs = nn.ModuleList()
        for _ in range(depth):
            mlp = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))
            self.convs.append(GPSConv(HIDDEN, GINConv(mlp), heads=HEADS, attn_type="multihead"))
        self.head = nn.Linear(HIDDEN, classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = self.node_emb(x)
        for conv in self.convs:
            x = conv(x, edge_index)
        out: Tensor = self.head(x)
        return out


class TransformerStack(nn.Module):
    """A graph transformer as PyG users write one: ``TransformerConv`` attention (4 heads of 16
    channels, concatenated; PyG's default root weight) over ``convs`` and ``norms`` ModuleLists,
    the skips in ``forward``:

    - Pre-LN: ``h = h + convs[k](norms[k](h))``, a final LayerNorm, a linear head;
    - Post-LN: ``h = norms[k](h + convs[k](h))``, a linear head.
    """

    def __init__(self, in_channels: int, classes: int, depth: int, pre_ln: bool) -> None:
        from torch_geometric.nn import TransformerConv

        super().__init__()
        self.pre_ln = pre_ln
        self.lin_in = nn.Linear(in_channels, HIDDEN)
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for _ in range(depth):
            self.convs.append(TransformerConv(HIDDEN, HIDDEN // HEADS, heads=HEADS))
            self.norms.append(nn.LayerNorm(HIDDEN))
        self.norm_out = nn.LayerNorm(HIDDEN) if pre_ln else None
        self.head = nn.Linear(HIDDEN, classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = self.lin_in(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            if self.pre_ln:
                h = h + conv(norm(h), edge_index)
            else:
                h = norm(h + conv(h, edge_index))
        if self.norm_out is not None:
            h = self.norm_out(h)
        out: Tensor = self.head(h)
        return out


def _pre_ln_stream(model: TransformerStack) -> list[nn.Module]:
    # the stream enters each block's pre-norm; after the last block, the final norm
    assert model.norm_out is not None
    return [*model.norms, model.norm_out]


def _post_ln_stream(model: TransformerStack) -> list[nn.Module]:
    # the stream enters each block's attention; after the last block, the head
    return [*model.convs, model.head]


# ----------------------------------------------------------------------------- the table


def _basic(cls_name: str, **kwargs: Any) -> Callable[[int, int, int], nn.Module]:
    def build(in_channels: int, classes: int, depth: int) -> nn.Module:
        from torch_geometric.nn import models

        cls = getattr(models, cls_name)
        model: nn.Module = cls(in_channels, HIDDEN, num_layers=depth, **kwargs)
        return model

    return build


def _native(name: str) -> Callable[[int, int, int], nn.Module]:
    def build(in_channels: int, classes: int, depth: int) -> nn.Module:
        from oversmooth.nn import build_model

        # the seed comes from the global generator that build() seeded
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
        return build_model(
            name,
            conv="san",
            depth=depth,
            in_channels=in_channels,
            out_channels=classes,
            seed=seed,
            dtype="float64",
        )

    return build


_BASIC = (
    "no classification head (out_channels=None: all num_layers convolutions keep the width), "
    "ReLU between convolutions, no norm, no residual, jk=None"
)

ZOO: dict[str, ZooEntry] = {
    e.key: e
    for e in (
        ZooEntry("gcn", "GCN", "models.GCN", f"GCN(in, 64, num_layers=L); {_BASIC}", _basic("GCN")),
        ZooEntry(
            "gat",
            "GAT",
            "models.GAT",
            f"GAT(in, 64, num_layers=L, heads=8): 8 heads of 8 channels; {_BASIC}",
            _basic("GAT", heads=GAT_HEADS),
        ),
        ZooEntry(
            "gatv2",
            "GATv2",
            "models.GAT (v2=True)",
            f"GAT(in, 64, num_layers=L, heads=8, v2=True); {_BASIC}",
            _basic("GAT", heads=GAT_HEADS, v2=True),
        ),
        ZooEntry(
            "sage",
            "GraphSAGE",
            "models.GraphSAGE",
            f"GraphSAGE(in, 64, num_layers=L), mean aggregation with root weight; {_BASIC}",
            _basic("GraphSAGE"),
        ),
        ZooEntry(
            "gin",
            "GIN",
            "models.GIN",
            f"GIN(in, 64, num_layers=L): sum aggregation, eps=0, a 2-layer MLP per layer; {_BASIC}",
            _basic("GIN"),
        ),
        ZooEntry(
            "gcn-pairnorm",
            "GCN + PairNorm",
            "models.GCN, PairNorm",
            "GCN(in, 64, num_layers=L, norm='pairnorm'): PairNorm(scale=64) after every "
            "convolution but the last, then ReLU; no head (PyG hands hidden_channels to the "
            "norm's first argument, PairNorm's scale: its paper's default is 1)",
            _basic("GCN", norm="pairnorm"),
        ),
        ZooEntry(
            "gcnii",
            "GCNII",
            "GCN2Conv",
            "examples/gcn2_cora.py: x0 = relu(Linear(in, 64)(x)); L x relu(GCN2Conv(64, "
            "alpha=0.1, theta=0.5, layer=k, shared_weights=True)(x, x0)); Linear head",
            lambda i, c, d: GCNII(i, c, d),
        ),
        ZooEntry(
            "appnp",
            "APPNP",
            "APPNP",
            "benchmark/citation/appnp.py: h = Linear(64, classes)(relu(Linear(in, 64)(x))); "
            "APPNP(K=L, alpha=0.1) propagates the class scores; layer k = after step k",
            lambda i, c, d: APPNPNet(i, c, d),
            prunable=False,
        ),
        ZooEntry(
            "deepergcn",
            "DeeperGCN (res+)",
            "DeepGCNLayer, GENConv",
            "examples/ogbn_proteins_deepgcn.py: Linear(in, 64); L x DeepGCNLayer(GENConv(64, "
            "64, aggr='softmax', t=1, learn_t=True, num_layers=2, norm='layer'), LayerNorm, "
            "ReLU, block='res+'); Linear head",
            lambda i, c, d: DeeperGCN(i, c, d),
            capture="residual",
        ),
        ZooEntry(
            "gps",
            "GPS",
            "GPSConv, GINConv",
            "examples/graph_gps.py: Linear(in, 64); L x GPSConv(64, GINConv(MLP 64-64-64), "
            "heads=4, attn_type='multihead', norm='batch_norm' (eval: identity at init)); "
            "Linear head",
            lambda i, c, d: GPS(i, c, d),
        ),
        ZooEntry(
            "transformer-preln",
            "Pre-LN TransformerConv",
            "TransformerConv",
            "Linear(in, 64); L x h = h + TransformerConv(64, 16, heads=4)(LayerNorm(h)) over "
            "convs/norms ModuleLists; final LayerNorm; Linear head; probed with "
            "stream=[*norms, final norm]",
            lambda i, c, d: TransformerStack(i, c, d, pre_ln=True),
            capture="residual",
            stream=_pre_ln_stream,
        ),
        ZooEntry(
            "transformer-postln",
            "Post-LN TransformerConv",
            "TransformerConv",
            "Linear(in, 64); L x h = LayerNorm(h + TransformerConv(64, 16, heads=4)(h)) over "
            "convs/norms ModuleLists; Linear head; probed with stream=[*convs, head]",
            lambda i, c, d: TransformerStack(i, c, d, pre_ln=False),
            capture="residual",
            stream=_post_ln_stream,
        ),
        ZooEntry(
            "zoo-preln",
            "oversmooth Pre-LN SAN",
            "oversmooth build_model('preln')",
            "build_model('preln', conv='san'): width 32, 4 heads, node LayerNorm, MLP encoder, "
            "linear decoder (the seed paper's)",
            _native("preln"),
            capture="residual",
            native=True,
        ),
        ZooEntry(
            "zoo-postln",
            "oversmooth Post-LN SAN",
            "oversmooth build_model('postln')",
            "build_model('postln', conv='san'): as Pre-LN, Post-LN blocks",
            _native("postln"),
            capture="residual",
            native=True,
        ),
        ZooEntry(
            "zoo-nonlocal",
            "oversmooth nonlocal SAN",
            "oversmooth build_model('nonlocal')",
            "build_model('nonlocal', conv='san'): Post-LN blocks, each head scaled by its own "
            "Laplacian energy",
            _native("nonlocal"),
            capture="residual",
            native=True,
        ),
    )
}


def zoo_entry(key: str) -> ZooEntry:
    """The entry named ``key``; an unknown name lists the valid ones."""
    if key not in ZOO:
        raise ValueError(f"architecture: unknown name {key!r}; expected any of {', '.join(ZOO)}")
    return ZOO[key]


def build(key: str, in_channels: int, classes: int, depth: int, seed: int) -> nn.Module:
    """Architecture ``key`` at ``depth`` layers with parameters drawn from ``seed``: float64,
    ``eval()`` mode; the global random state is left as it was."""
    entry = zoo_entry(key)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth: expected a positive integer, received {depth!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = entry.build(in_channels, classes, depth)
    return model.to(torch.float64).eval()
