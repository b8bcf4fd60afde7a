"""Pruning models whose skips live in forward: the pruned block is removed from the stream,
checked against a hand-pruned copy of the model."""

from __future__ import annotations

import copy

import numpy as np

import pytest
import torch
from torch import nn
from torch_geometric.nn import GCN

import oversmooth.metrics as M
from oversmooth import build_model, prune_sensitivity

from .pyg_models import ConvsNamedBlocks, DeeperGCN, PreLNTransformer, small_graph


def _change(model, data, pruned) -> tuple[float, float]:
    """logits_change and final_energy of a hand-pruned copy against the model."""
    with torch.no_grad():
        base = model(data.x, data.edge_index)
        out = pruned(data.x, data.edge_index)
    return (
        ((out - base).norm() / base.norm()).item(),
        M.laplacian_energy(out, data.edge_index).item(),
    )


def _without_block(model: PreLNTransformer, k: int) -> PreLNTransformer:
    pruned = copy.deepcopy(model)
    del pruned.convs[k - 1], pruned.norms[k - 1]  # h passes block k unchanged
    return pruned


def test_convs_in_a_list_named_blocks_are_pruned_out_of_the_stream_not_as_blocks():
    """A list named ``blocks`` was taken for whole blocks whatever the forward does: replacing
    a conv by its input made the step h + norm(h), said to be the identity (an audit: logits
    change 0.91 where removing the block gives 0.69)."""
    torch.manual_seed(0)
    data = small_graph()
    model = ConvsNamedBlocks(5).double().eval()
    frame = prune_sensitivity(model, data)
    for k in (1, 2, 3):
        with torch.no_grad():
            base = model.stream(data.x, data.edge_index)[-1]
            out = model.stream(data.x, data.edge_index, skip=k - 1)[-1]
        change = ((out - base).norm() / base.norm()).item()
        assert frame[frame.layer == k].iloc[0]["logits_change"] == pytest.approx(change, rel=1e-9)
    assert frame.attrs["pruned_as"] == {1: "zero", 2: "zero", 3: "zero"}
    assert frame.attrs["identity_on_stream"] == {1: True, 2: True, 3: True}


@pytest.mark.parametrize("head", [False, True])
def test_pruning_a_pre_ln_layer_removes_its_whole_block(head):
    torch.manual_seed(0)
    data = small_graph()
    model = PreLNTransformer(5, final_norm=head, out=4 if head else None).double().eval()
    frame = prune_sensitivity(model, data)
    for k in (1, 2, 3):
        change, _ = _change(model, data, _without_block(model, k))
        with torch.no_grad():  # the final energy is the stream's (the final norm's input)
            stream = model.stream(data.x, data.edge_index, skip=k - 1)[-1]
        row = frame[frame.layer == k].iloc[0]
        assert row["logits_change"] == pytest.approx(change, rel=1e-6)
        energy = M.laplacian_energy(stream, data.edge_index).item()
        assert row["final_energy"] == pytest.approx(energy, rel=1e-9)
    assert frame.attrs["pruned_as"] == {1: "zero", 2: "zero", 3: "zero"}
    assert frame.attrs["identity_on_stream"] == {1: True, 2: True, 3: True}
    assert frame.attrs["energy_on"] == "stream"


def test_an_own_model_final_energy_is_the_zoo_models_on_the_same_blocks():
    """The final energy of a model pruned through hooks was the logits' energy, that of the
    zoo's models the decoder input's (X^L): the same blocks in a thin wrapper gave other
    energy changes, of the other sign for two layers of three."""
    from oversmooth import build_model

    class Wrapped(nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner, self.blocks = inner, inner.blocks

        def forward(self, x, edge_index):
            return self.inner(x, edge_index)

    torch.manual_seed(0)
    data = small_graph()
    zoo = build_model("preln", depth=4, in_channels=5, out_channels=3, dtype="float64")
    ours = prune_sensitivity(zoo, data, layers=[1, 4])
    theirs = prune_sensitivity(Wrapped(zoo), data, layers=[1, 4])
    for column in ("logits_change", "final_energy", "energy_change"):
        np.testing.assert_allclose(theirs[column], ours[column], rtol=1e-9)
    assert theirs.attrs["energy_on"] == ours.attrs["energy_on"] == "stream"


@pytest.mark.parametrize("out", [4, 8])  # 8: the head keeps the stream's width
def test_the_last_block_before_a_bare_head_is_removed_like_the_others_and_said_so(out):
    """A head of the stream's width made the model's output look like the stream: the zero
    branch failed against it and the last layer was measured with its output replaced by its
    input (h + norm(h)), a different operation, under a misleading warning."""
    torch.manual_seed(0)
    data = small_graph()
    model = PreLNTransformer(5, out=out).double().eval()  # the stream after block 3 is not seen
    with pytest.warns(UserWarning, match=r"layer 3: .*set to zero.*not seen"):
        frame = prune_sensitivity(model, data, layers=[3])
    change, _ = _change(model, data, _without_block(model, 3))
    assert frame["logits_change"][0] == pytest.approx(change, rel=1e-6)
    assert frame.attrs["identity_on_stream"] == {3: None}
    assert frame.attrs["pruned_as"] == {3: "zero"}
    assert frame.attrs["energy_on"] == "output"  # the stream after block 3 is not seen


class _Skip(nn.Module):
    def forward(self, x, *args):
        return x


def test_prune_refuses_a_layer_the_forward_calls_only_through_its_conv():
    torch.manual_seed(0)
    data = small_graph()
    model = DeeperGCN(5).double().eval()
    with pytest.raises(ValueError, match=r"layer 1 \(layers\.0\) cannot be pruned.*never calls"):
        prune_sensitivity(model, data)
    frame = prune_sensitivity(model, data, layers=[2, 3])
    for k in (2, 3):
        pruned = copy.deepcopy(model)
        pruned.layers[k - 1] = _Skip()
        change, _ = _change(model, data, pruned)
        assert frame[frame.layer == k]["logits_change"].item() == pytest.approx(change, rel=1e-6)
    assert frame.attrs["pruned_as"] == {2: "block", 3: "block"}


def test_a_layer_that_cannot_be_made_the_identity_is_measured_and_said_so():
    torch.manual_seed(0)
    data = small_graph()
    gcn = GCN(5, 5, num_layers=3).double()  # relu after conv 1: its input x < 0 is not kept
    with pytest.warns(UserWarning, match=r"layer 1: the layer's output replaced by its input"):
        frame = prune_sensitivity(gcn, data, layers=[1, 2])
    assert frame.attrs["identity_on_stream"] == {1: False, 2: True}
    assert frame.attrs["pruned_as"] == {1: "input", 2: "input"}


def test_tied_or_reordered_layers_are_refused_not_pruned_by_their_list_place():
    """One module listed for every layer (weight tying) cannot lose one layer by being taken
    out, and a stack run in another order than listed would be pruned by the wrong number (a
    Probe counts layers in the order they run)."""
    from .pyg_models import small_graph
    from .test_probe import Reversed, Tied

    data = small_graph()
    data.x = data.x.double()
    with pytest.raises(ValueError, match=r"convs\.0 stands for 4 of the 4 layers \(weight tying\)"):
        prune_sensitivity(Tied().double().eval(), data)
    with pytest.raises(ValueError, match="runs its layers in another order than they are listed"):
        prune_sensitivity(Reversed().double().eval(), data)


def test_a_batch_of_unequal_graphs_is_pruned_on_the_mean_of_each_graphs_energy():
    """The final energies are the mean over graphs of each graph's own (as the Probe's):
    a 3-node path beside a 30-node ring read one energy over all 33 nodes, 7.80 for 5.96,
    and the pruned layer's energy change even flipped its sign."""
    from torch_geometric.data import Data

    from oversmooth import Probe
    from oversmooth.metrics import laplacian_energy

    path = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    ring = torch.stack([torch.arange(30), (torch.arange(30) + 1) % 30]) + 3
    ei = torch.cat([path, ring, ring.flip(0)], dim=1)
    batch = torch.cat([torch.zeros(3, dtype=torch.long), torch.ones(30, dtype=torch.long)])
    x = torch.randn(33, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    data = Data(x=x, edge_index=ei, batch=batch, num_nodes=33)
    model = build_model("preln", depth=6, in_channels=4, out_channels=2, dtype="float64")
    frame = prune_sensitivity(model, data, layers=[3])
    with torch.no_grad(), Probe(model, data) as probe:
        model(x, ei, batch)
    final = probe.to_frame()["laplacian_energy"].iloc[-1]
    assert frame.attrs["baseline"]["final_energy"] == pytest.approx(final, rel=1e-12)
    states = []
    hooks = [b.register_forward_hook(lambda m, a, o: states.append(o)) for b in model.blocks]
    with torch.no_grad():
        model(x, ei, batch, skip=[2])  # block 3 left out
    for h in hooks:
        h.remove()
    pruned = laplacian_energy(states[-1], ei, batch=batch).item()
    assert frame["final_energy"].iloc[0] == pytest.approx(pruned, rel=1e-12)
    assert frame["energy_change"].iloc[0] == pytest.approx(pruned / final - 1, rel=1e-9)


def test_an_edge_set_model_is_refused_in_one_line():
    from torch_geometric.data import Data

    model = build_model("postln", conv="esa", depth=3, in_channels=4, out_channels=2)
    ring = torch.stack([torch.arange(6), (torch.arange(6) + 1) % 6])
    data = Data(x=torch.randn(6, 4), edge_index=torch.cat([ring, ring.flip(0)], dim=1))
    with pytest.raises(ValueError, match="pruning is not implemented for it"):
        prune_sensitivity(model, data, layers=[2])


def test_pruning_puts_every_module_back_in_its_own_mode():
    """Only the top-level flag was restored: a frozen (eval) encoder of a training model came
    back in train mode (an audit)."""
    cora = small_graph()
    model = build_model("preln", depth=4, in_channels=cora.num_features, out_channels=7)
    model.train()
    model.encoder.eval()
    model.blocks[2].eval()
    before = [m.training for m in model.modules()]
    prune_sensitivity(model, cora, [2])
    assert [m.training for m in model.modules()] == before


def test_layer_numbers_from_numpy_or_torch_are_accepted():
    """``layers=np.arange(...)`` was refused ("received np.int64(2)"), one int raised Python's
    TypeError (an audit)."""
    cora = small_graph()
    model = build_model("preln", depth=4, in_channels=cora.num_features, out_channels=7)
    ints = prune_sensitivity(model, cora, [2, 3])["logits_change"].tolist()
    for given in (np.arange(2, 4), torch.arange(2, 4), [np.int64(2), np.int32(3)]):
        assert prune_sensitivity(model, cora, given)["logits_change"].tolist() == ints
    assert prune_sensitivity(model, cora, 2)["logits_change"].tolist() == ints[:1]
    with pytest.raises(ValueError, match="expected integers"):
        prune_sensitivity(model, cora, [2.0])


def test_a_baseline_energy_of_zero_is_said():
    """On a graph without edges the relative energy change was a silent NaN (0/0; an audit)."""
    from torch_geometric.data import Data

    data = Data(x=torch.randn(10, 5), edge_index=torch.empty(2, 0, dtype=torch.long))
    model = build_model("preln", depth=4, in_channels=5, out_channels=3)
    with pytest.warns(UserWarning, match="energy_change, relative to it, is undefined"):
        frame = prune_sensitivity(model, data, [2])
    assert frame["final_energy"].tolist() == [0.0]


class _Branch(nn.Module):
    """A block module holding a conv: the list is taken for blocks until the forward shows
    that it does not chain them."""

    def __init__(self, width: int) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(width, width)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


class _SkipOutsideBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Branch(5) for _ in range(3))
        self.head = nn.Linear(5, 3)

    def stream(self, x, edge_index, skip: int | None = None):
        for k, block in enumerate(self.blocks):
            if k != skip:
                x = x + torch.tanh(block(x, edge_index))
        return x

    def forward(self, x, edge_index):
        return self.head(self.stream(x, edge_index))


def test_block_modules_the_forward_does_not_chain_are_pruned_as_layers():
    """``h = h + tanh(blocks[k](h))`` over block modules: a block replaced by its input made
    the step h + tanh(h) (said unchecked; an audit: with a wrapper returning its branch, a
    block of zero weights read a logits change of 0.59).  The forward does not chain the
    blocks, so they are read as layers where the stream can be told: each branch set to zero,
    checked on the stream, and every logits change is that of the forward without the step."""
    torch.manual_seed(0)
    data = small_graph()
    model = _SkipOutsideBlocks().double().eval()
    with pytest.warns(UserWarning, match=r"measured layer 3: the layer's output set to zero"):
        frame = prune_sensitivity(model, data)
    assert set(frame.attrs["pruned_as"].values()) == {"zero"}
    assert frame.attrs["identity_on_stream"] == {1: True, 2: True, 3: None}
    x = data.x.double()
    with torch.no_grad():
        base = model(x, data.edge_index)
        for k in (1, 2, 3):
            z = model.head(model.stream(x, data.edge_index, skip=k - 1))
            change = float((z - base).norm() / base.norm())
            assert frame["logits_change"].iloc[k - 1] == pytest.approx(change, rel=1e-12)


class _Convs(nn.Module):
    """``count`` GCN convs of width 5 in ``convs`` and a head; the forward is the subclass's."""

    def __init__(self, count: int = 2) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.convs = nn.ModuleList(GCNConv(5, 5) for _ in range(count))
        self.head = nn.Linear(5, 3)


class _CalledTwice(_Convs):
    """``convs[0]`` run three times in one forward, ``convs[1]`` once."""

    def forward(self, x, edge_index):
        for conv in (self.convs[0], self.convs[0], self.convs[0], self.convs[1]):
            x = x + conv(x, edge_index)
        return self.head(x)


@pytest.mark.parametrize("layer", [1, 2])
def test_a_module_called_several_times_is_refused(layer):
    """A module listed once and called three times was pruned as one checked layer (three
    residual steps gone, no warning: an audit), and the layer after it, numbered by the calls,
    measured as h + h (0.603 for 0.492, its energy change 0 for 19.4: a review)."""
    model = _CalledTwice().double().eval()
    with pytest.raises(ValueError, match=r"layer 1 \(convs.0, 3 calls\).*several times"):
        prune_sensitivity(model, small_graph(), layers=[layer])


class _Once(_Convs):
    """Two residual convs, each called once."""

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = x + conv(x, edge_index)
        return self.head(x)


class _RandomInEval(_Convs):
    """``F.dropout(h, 0.5)`` without ``training=self.training``: random in eval mode."""

    def __init__(self) -> None:
        super().__init__(3)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = x + conv(torch.nn.functional.dropout(x, 0.5), edge_index)
        return self.head(x)


@pytest.mark.filterwarnings("ignore:prune_sensitivity. for 1 layer")
def test_a_forward_random_in_eval_mode_is_refused():
    """A do-nothing layer read a logits change of 0.78 from the forward's own dropout (an
    audit): two unpruned forwards must agree."""
    model = _RandomInEval().double().eval()
    with pytest.raises(ValueError, match=r"two unpruned forwards of _RandomInEval"):
        prune_sensitivity(model, small_graph(48), layers=[2])
    # a deterministic forward: no noise, no word
    frame = prune_sensitivity(_Once().double().eval(), small_graph(), layers=[2])
    assert frame.attrs["forward_noise"] == 0.0


class _ChainedConvs(nn.Module):
    """Bare convs in ``blocks``, chained (``h = conv(h)``), then a head: blocks, whose outputs
    are the stream."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.blocks = nn.ModuleList(GCNConv(5, 5) for _ in range(3))
        self.head = nn.Linear(5, 3)

    def stream(self, x, edge_index, skip: int | None = None):
        for k, conv in enumerate(self.blocks):
            if k != skip:
                x = conv(x, edge_index)
        return x

    def forward(self, x, edge_index):
        return self.head(self.stream(x, edge_index))


def test_bare_convs_the_forward_chains_stay_blocks_with_the_heads_input_energy():
    """Read as layers, such a stack's final energy moved to the head's output (5-8x off the
    energy of the head's input: a review); chained, they are blocks."""
    torch.manual_seed(0)
    data = small_graph()
    model = _ChainedConvs().double().eval()
    frame = prune_sensitivity(model, data)
    for k in (1, 2, 3):
        with torch.no_grad():
            state = model.stream(data.x, data.edge_index, skip=k - 1)
        energy = M.laplacian_energy(state, data.edge_index).item()
        assert frame[frame.layer == k].iloc[0]["final_energy"] == pytest.approx(energy, rel=1e-9)
    assert set(frame.attrs["pruned_as"].values()) == {"block"}
    assert frame.attrs["energy_on"] == "stream"


@pytest.mark.parametrize(("lost", "gained", "nodes"), [(7, 5, 541), (2, 0, 541), (0, 3, 1000)])
def test_a_drops_paired_interval_is_the_exact_binomial_one(lost, gained, nodes):
    """The drop's interval from the nodes the pruning changed: given the m of them, lost is
    binomial in m (scipy's exact Clopper-Pearson interval of the share, mapped to the drop);
    none changed is exactly 0."""
    from scipy.stats import binomtest

    from oversmooth.prune import drop_interval

    m = lost + gained
    ci = binomtest(lost, m).proportion_ci(0.95, method="exact")
    lo, hi = drop_interval(lost, gained, nodes)
    assert lo == pytest.approx((2 * ci.low - 1) * m / nodes, abs=1e-12)
    assert hi == pytest.approx((2 * ci.high - 1) * m / nodes, abs=1e-12)
    assert lo <= (lost - gained) / nodes <= hi
    assert drop_interval(0, 0, nodes) == (0.0, 0.0)


def test_pruning_counts_the_nodes_each_drop_changed():
    from oversmooth.data import load

    cora = load("cora")
    torch.manual_seed(0)
    model = build_model("preln", depth=4, in_channels=cora.num_features, out_channels=7).eval()
    frame = prune_sensitivity(model, cora, layers=[1, 3], mask="test_mask")
    mask = cora.test_mask
    with torch.no_grad():
        right = model(cora.x, cora.edge_index).argmax(1)[mask] == cora.y[mask]
        for row in frame.itertuples():
            out = model.run_blocks(
                model.encode(cora.x),
                model.context(cora.edge_index, cora.num_nodes),
                skip=[row.layer - 1],
            )
            now = model.decoder(out).argmax(1)[mask] == cora.y[mask]
            assert row.lost == int((right & ~now).sum()) and row.gained == int((~right & now).sum())
            assert row.accuracy_drop == pytest.approx((row.lost - row.gained) / int(mask.sum()))
            assert row.drop_low <= row.accuracy_drop <= row.drop_high
            assert row.nodes == int(mask.sum())


class _TinyNoise(_Once):
    """A forward whose output moves by about 1e-8 between calls (as a GPU's scatter-adds
    reorder their float32 sums)."""

    def forward(self, x, edge_index):
        out = super().forward(x, edge_index)
        return out + 1e-8 * out.abs().mean() * torch.randn_like(out)


@pytest.mark.filterwarnings("ignore:prune_sensitivity. for 1 layer")
def test_a_forward_with_rounding_noise_says_its_noise_floor():
    """Below the random-forward bound the difference is said as the changes' noise floor."""
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match=r"differ by .*the forward's own noise"):
        frame = prune_sensitivity(_TinyNoise().double().eval(), small_graph(), layers=[2])
    assert 1e-10 < frame.attrs["forward_noise"] < 1e-6


class _LogSoftmax(_Once):
    """A head ``log(softmax)`` with entries at -inf: deterministic, not finite."""

    def forward(self, x, edge_index):
        out = super().forward(x, edge_index)
        return torch.log(torch.softmax(out * 1e4, dim=1))


@pytest.mark.filterwarnings("ignore:prune_sensitivity. for 1 layer")
def test_a_deterministic_forward_with_infinities_is_not_called_random():
    """Two equal forwards holding -inf (a log-softmax head) differ by inf/inf = NaN, and were
    refused as random (a review)."""
    torch.manual_seed(0)
    model = _LogSoftmax().double().eval()
    frame = prune_sensitivity(model, small_graph(), layers=[1])
    assert frame.attrs["forward_noise"] == 0.0


class _Residual(nn.Module):
    """A whole residual block: its output is the stream after it."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(5, 5)

    def forward(self, x, edge_index):
        return x + self.conv(x, edge_index)


class _ActivationBetween(nn.Module):
    """``h = relu(blocks[k](h))``: whole blocks with an activation between them."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Residual() for _ in range(4))
        self.head = nn.Linear(5, 3)

    def forward(self, x, edge_index):
        for block in self.blocks:
            x = torch.relu(block(x, edge_index))
        return self.head(x)


def test_whole_blocks_with_an_activation_between_stay_blocks():
    """Read as layers (a review), their final energy was the logits': 0.216 for the stream's
    1.82.  Blocks whose next input is no skip sum of the last are pruned as blocks, said
    unchecked, the final energy that of the last block's output (before the activation the
    forward applies to it, as docs/prune.md says)."""
    from oversmooth.metrics import laplacian_energy

    torch.manual_seed(0)
    data = small_graph(48)
    model = _ActivationBetween().double().eval()
    with pytest.warns(UserWarning, match=r"not checked") as said:
        frame = prune_sensitivity(model, data, layers=[2])
    assert frame.attrs["pruned_as"] == {2: "block"}
    # unchecked, not said to be the identity (an audit)
    assert not any("(the identity on the stream)" in str(w.message) for w in said)
    seen = []
    handle = model.blocks[-1].register_forward_hook(lambda m, a, out: seen.append(out))
    with torch.no_grad():
        model(data.x.double(), data.edge_index)
    handle.remove()
    last = float(laplacian_energy(seen[0], data.edge_index))
    assert frame.attrs["baseline"]["final_energy"] == pytest.approx(last, rel=1e-9)
    assert frame.attrs["identity_on_stream"] == {2: None}
