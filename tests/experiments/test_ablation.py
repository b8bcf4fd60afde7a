"""The reproduction's ablations: each variant is real, and one pass gives every depth."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from oversmooth.experiments.ablation import (
    ABLATIONS,
    BASELINE,
    Ablation,
    ablation_summary,
    final_energies,
)
from oversmooth.data import load
from oversmooth.metrics import laplacian_energy
from oversmooth.nn import build_model


@pytest.fixture(scope="module")
def cora():
    return load("cora")


def test_first_blocks_of_a_deep_model_are_the_shallow_model(cora):
    deep = final_energies("postln", cora, BASELINE, seed=3, depths=(2, 5))
    shallow = build_model(
        "postln", depth=2, in_channels=cora.num_features, out_channels=7, seed=3, dtype="float64"
    )
    with torch.no_grad():
        ctx = shallow.context(cora.edge_index, cora.num_nodes)
        h = shallow.run_blocks(shallow.encoder(cora.x.double()), ctx)
    assert deep[2] == pytest.approx(float(laplacian_energy(h, cora.edge_index)), rel=1e-12)
    assert set(deep) == {2, 5}


@pytest.mark.parametrize(
    "ablation", [a for a in ABLATIONS if a is not BASELINE], ids=lambda a: a.name
)
def test_every_variant_changes_the_measurement(cora, ablation):
    """A variant that silently measured the baseline would be a lie in the report."""
    arch = "nonlocal" if "nonlocal" in ablation.name else "postln"
    base = final_energies(arch, cora, BASELINE, seed=0, depths=(3,))[3]
    got = final_energies(arch, cora, ablation, seed=0, depths=(3,))[3]
    assert math.isfinite(got) and got > 0
    assert abs(got - base) > 1e-9 * base, ablation.name


def test_summary_ratios_worst_factor_and_within(cora):
    paper = {
        "depths": [2, 32, 256],
        "final_energy_at_init": {"postln": {"cora": [1.0, 0.1, 0.01]}},
    }
    rows = [
        {"ablation": "a", "model": "postln", "seed": s, "depth": d, "energy": e * f}
        for s, f in ((0, 0.5), (1, 2.0))
        for d, e in ((2, 1.0), (32, 0.2), (256, 0.01))
    ]
    table = ablation_summary(pd.DataFrame(rows), paper)
    assert table["geomean"].tolist() == pytest.approx([1.0, 0.2, 0.01])
    assert table["ratio"].tolist() == pytest.approx([1.0, 2.0, 1.0])
    assert table["min"].tolist() == pytest.approx([0.5, 0.1, 0.005])
    assert table["worst_factor"].tolist() == pytest.approx([2.0] * 3) and table["within"].all()


def test_combining_variants_merges_their_choices():
    combo = Ablation("a", "A", {"ffn": 0}) + Ablation("b", "B", measure={"measure": "degree"})
    assert combo.model == {"ffn": 0} and combo.measure == {"measure": "degree"}
    assert combo.keys() == {"model.ffn", "measure.measure"}


@pytest.mark.parametrize(
    "options",
    [{"self_loops": False}, {"score_scale": False}, {"nonlocal_norm": "sum"}],
    ids=lambda o: next(iter(o)),
)
def test_ablated_choices_agree_between_kernels(options):
    from oversmooth.nn import set_kernel

    torch.manual_seed(0)
    # node 5 has no in-neighbour: without self loops it keeps itself
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 0, 0, 3]])
    x = torch.randn(6, 5, dtype=torch.float64)
    outs = []
    for kernel in ("edge", "csr"):
        model = build_model(
            "nonlocal", depth=3, in_channels=5, out_channels=2, dtype="float64", **options
        )
        with torch.no_grad():
            outs.append(set_kernel(model, kernel)(x, edge_index))
    assert torch.allclose(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    assert torch.isfinite(outs[0]).all()


def test_diffusion_refuses_to_drop_its_self_loops():
    with pytest.raises(ValueError, match="self_loops: the diffusion model"):
        build_model("diffusion", depth=2, in_channels=3, out_channels=2, self_loops=False)
