"""Every plot function draws on the Axes it is given and returns it (no pyplot involved)."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oversmooth.report import plots


def _ax():
    return Figure().add_subplot()


def test_plot_functions_draw_and_return_their_axes():
    layers = np.arange(0, 65)
    values = np.exp(-0.1 * layers)
    fit = {"tail": {"span": [16, 64], "power": {"law": "power", "exponent": -2.0, "log_c": 0.0, "r2": 0.9},
                    "exponential": {"law": "exponential", "exponent": -0.1, "log_c": 0.0, "r2": 0.99}}}
    ax = _ax()
    assert plots.energy_curves(ax, [{"label": "a", "layers": layers, "values": values, "fit": fit, "floor": 1e-13}]) is ax
    assert len(ax.lines) == 4 and ax.get_xscale() == "log"
    ax = _ax()
    assert plots.relative_energy_curves(ax, [{"label": "a", "layers": layers, "values": np.r_[np.nan, np.diff(values)]}]) is ax
    ax = _ax()
    assert plots.cosine_curves(ax, [{"label": "a", "layers": layers, "values": np.ones(65)}]) is ax
    ax = _ax()
    assert plots.similarity_heatmap(ax, np.eye(5), range(5), "t") is ax and ax.images
    ax = _ax()
    assert plots.pruning_bars(ax, [2, 4], [0.1, 0.2], "change") is ax and len(ax.patches) == 2
    summary = pd.DataFrame({"dataset": "cora", "model": ["a", "a", "b", "b"], "depth": [2, 4, 2, 4], "final_energy": [1, 0.1, 1, 2.0]})
    ax = _ax()
    assert plots.final_energy_vs_depth(ax, summary, "cora") is ax and len(ax.lines) == 2
    table = pd.DataFrame({"model": ["a", "a"], "depth": [2, 4], "ours_mean": [1.0, 0.5], "paper": [1.0, 0.1]})
    ax = _ax()
    assert plots.energy_vs_depth_against_reference(ax, table, ["a"], "cora") is ax and len(ax.lines) == 2
    assert "matplotlib.pyplot" not in sys.modules
