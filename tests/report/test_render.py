"""Rebuilding a report from a folder's files, also a folder written with older column names."""

from __future__ import annotations

import pandas as pd

from oversmooth.analysis import AnalysisConfig, run_analysis
from oversmooth.config import ModelConfig
from oversmooth.report.render import render_report, write_analysis


def test_an_old_analyze_folder_rebuilds_with_its_cosine_figure(tmp_path):
    model = ModelConfig("postln", depth=3, hidden=8, heads=1)
    result = run_analysis(AnalysisConfig(model=model, seeds=(0,)))
    folder = write_analysis(result, tmp_path / "run")
    table = pd.read_csv(folder / "metrics.csv")
    assert "mean_cosine_similarity" in table
    # the folder as an older version wrote it: the adjacent cosine was `cosine_prev`
    table.rename(columns={"mean_cosine_similarity": "cosine_prev"}).to_csv(
        folder / "metrics.csv", index=False
    )
    (folder / "cosine.png").unlink()
    render_report(folder)
    assert (folder / "cosine.png").stat().st_size > 0
    assert "cosine.png" in (folder / "report.md").read_text(encoding="utf-8")
