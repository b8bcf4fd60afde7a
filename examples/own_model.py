"""Probe your own PyTorch Geometric model with oversmooth.

A 32-layer PyG ``GCN`` (untrained, eval mode) on Cora: per-layer energies, the verdict, a
figure, the full report and the pruning sensitivity of two layers.

    python examples/own_model.py OUT_FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed

import torch
from torch_geometric.nn.models import GCN

import oversmooth
from oversmooth.data import load


def main(out: Path) -> None:
    data = load("cora")  # embedded in the package: no download
    torch.manual_seed(0)
    model = GCN(data.num_features, 32, num_layers=32, out_channels=7).eval()

    with oversmooth.Probe(model, data, similarity=True) as probe, torch.no_grad():
        model(data.x, data.edge_index)
    frame = probe.to_frame()  # one row per layer: laplacian_energy, relative_energy, ...
    print(oversmooth.verdict_text(oversmooth.verdict(frame), title="PyG GCN, 32 layers"))

    out.mkdir(parents=True, exist_ok=True)
    ax = oversmooth.plot(frame)  # log-log energy with the fitted laws
    ax.figure.savefig(out / "energy.png", dpi=120)
    report = oversmooth.write_report(probe, out / "report", title="PyG GCN, 32 layers")
    print(f"report: {report / 'report.html'}")

    sensitivity = oversmooth.prune_sensitivity(model, data, layers=[2, 30])
    print(sensitivity.to_string(index=False))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/own_model.py OUT_FOLDER")
    main(Path(sys.argv[1]))
