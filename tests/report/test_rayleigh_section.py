"""The scale-invariant energy shown beside the raw one for models without LayerNorm."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from oversmooth import feature_norm, laplacian_energy, rayleigh_energy
from oversmooth.analysis import AnalysisConfig, run_analysis
from oversmooth.report.document import Document
from oversmooth.report.render import rayleigh_section, write_analysis
from oversmooth.config import ModelConfig


def test_the_section_computes_the_rayleigh_energy_from_the_table_columns():
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 120), generator=gen)
    x = torch.randn(30, 5, generator=gen, dtype=torch.float64) * 1e4 + 3.0
    ratio = laplacian_energy(x, edge_index) / feature_norm(x) ** 2
    assert float(ratio) == pytest.approx(float(rayleigh_energy(x, edge_index)), rel=1e-12)


@pytest.mark.parametrize("model,shown", [("plain", True), ("postln", False)])
def test_analyze_report_shows_it_for_models_without_layernorm(tmp_path, model, shown):
    result = run_analysis(
        AnalysisConfig(
            model=ModelConfig(model, conv="gcn", depth=6, dtype="float64"),
            similarity=False,
            device="cpu",
        )
    )
    folder = write_analysis(result, tmp_path / model)
    text = (folder / "report.md").read_text()
    assert ("Scale-invariant energy" in text) is shown
    assert (folder / "rayleigh_energy.png").is_file() is shown


def test_a_growing_feature_norm_also_shows_it(tmp_path):
    frame = pd.DataFrame(
        {
            "layer": range(5),
            "laplacian_energy": [1.0, 10.0, 100.0, 1e3, 1e4],
            "feature_norm": [1.0, 3.0, 10.0, 30.0, 100.0],
        }
    )
    doc = Document("t")
    assert rayleigh_section(doc, frame) is True
    assert rayleigh_section(Document("t"), frame.assign(feature_norm=1.0)) is False
