"""Ablations of the reproduction: one unstated choice changed at a time.

The seed paper (Guan & He 2025) leaves several choices unstated: the encoder, the
initialisation of every projection, the FFN, the LayerNorm mode, whether dropout is active when
the energies are measured, self loops in the attention neighbourhood, the number of heads, the
score scaling, the ``1/n`` in the nonlocal factor, the precision, and the energy measure itself.
:data:`ABLATIONS` names one variant of each; :func:`run_ablations` measures the final-layer
Laplacian energy of untrained Pre-LN, Post-LN and nonlocal SAN under each, at the depths of
:data:`DEPTHS`, over several seeds, and :func:`ablation_summary` sets them beside the paper's
Tables 2, 4 and 6 (ours ÷ paper, geometric mean over seeds, with the seed range).
:func:`greedy_combination` then searches, per table, for a combination of variants that brings
it closer to the paper than any single one.

One forward pass of the deepest model gives every depth: parameters are drawn block after block
from one seeded generator, so the first ``k`` blocks of the depth-256 model *are* the depth-``k``
model of the same seed (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from torch import Tensor

__all__ = [
    "ABLATIONS",
    "DEPTHS",
    "Ablation",
    "ablation_summary",
    "final_energies",
    "greedy_combination",
    "run_ablations",
]

DEPTHS = (2, 32, 256)
ARCHS = ("preln", "postln", "nonlocal")
WITHIN = 3.0  # "within 3x" of the paper


@dataclass(frozen=True)
class Ablation:
    """One variant: ``model`` options for :func:`~oversmooth.nn.build_model`, ``measure``
    options for the energy (``self_loops``, ``measure``, ``final_norm``), ``train_mode`` for
    dropout active while measuring."""

    name: str
    description: str
    model: dict = field(default_factory=dict)
    measure: dict = field(default_factory=dict)
    train_mode: bool = False

    def keys(self) -> set[str]:
        return (
            {f"model.{k}" for k in self.model}
            | {f"measure.{k}" for k in self.measure}
            | ({"train_mode"} if self.train_mode else set())
        )

    def __add__(self, other: Ablation) -> Ablation:
        return Ablation(
            f"{self.name} + {other.name}",
            f"{self.description}; {other.description}",
            {**self.model, **other.model},
            {**self.measure, **other.measure},
            self.train_mode or other.train_mode,
        )


BASELINE = Ablation("baseline", "oversmooth's defaults (float64 model)")

ABLATIONS: tuple[Ablation, ...] = (
    BASELINE,
    Ablation(
        "encoder-linear", "encoder is one Linear layer, no hidden ReLU layer", {"encoder": "linear"}
    ),
    Ablation(
        "init-torch",
        "PyTorch's default Linear init for the attention projections too",
        {"init": "torch"},
    ),
    Ablation(
        "init-xavier-all",
        "Xavier-uniform for every Linear (encoder, FFN, decoder), zero biases",
        {"init": "xavier_all"},
    ),
    Ablation("no-ffn", "no FFN sublayer", {"ffn": 0}),
    Ablation("ffn-4x", "FFN width 4 x hidden (128) instead of 2 x", {"ffn": 128}),
    Ablation("norm-graph", "LayerNorm in graph mode instead of node mode", {"norm": "graph"}),
    Ablation("dropout-on", "encoder dropout (0.5) active while measuring", train_mode=True),
    Ablation("no-self-loops", "attention over N(i) without i itself", {"self_loops": False}),
    Ablation("heads-1", "1 attention head instead of 4", {"heads": 1}),
    Ablation("heads-8", "8 attention heads instead of 4", {"heads": 8}),
    Ablation("no-score-scale", "SAN scores not divided by sqrt(d_k)", {"score_scale": False}),
    Ablation(
        "nonlocal-sum", "nonlocal factor ||P_h X - X||^2 without the 1/n", {"nonlocal_norm": "sum"}
    ),
    Ablation(
        "float32",
        "model run in float32 (energies still accumulated in float64)",
        {"dtype": "float32"},
    ),
    Ablation(
        "energy-self-loops",
        "energy measured on the graph with self loops",
        measure={"self_loops": True},
    ),
    Ablation(
        "energy-degree",
        "energy with the degree measure (1/n) sum_i d_i ||(PX - X)_i||^2",
        measure={"measure": "degree"},
    ),
    Ablation(
        "energy-final-ln",
        "energy measured after a final LayerNorm of the last state",
        measure={"final_norm": True},
    ),
)


def final_energies(
    arch: str,
    data: Any,
    ablation: Ablation,
    seed: int,
    depths: Sequence[int] | None = None,
    dtype: str = "float64",
    device: Any = "cpu",
) -> dict[int, float]:
    """Laplacian energy of the block output at each of ``depths`` for the SAN model ``arch``
    under ``ablation``: one forward pass of the deepest model."""
    import torch
    import torch.nn.functional as F

    from oversmooth.graph import as_graph
    from oversmooth.metrics import energy
    from oversmooth.nn import build_model
    from oversmooth.runtime import resolve_dtype

    depths = DEPTHS if depths is None else depths
    options = {"dtype": dtype, **ablation.model}
    model = build_model(
        arch,
        conv="san",
        depth=max(depths),
        in_channels=data.num_features,
        out_channels=int(data.y.max()) + 1,
        seed=seed,
        device=device,
        **options,
    )
    x = data.x.to(device=device, dtype=resolve_dtype(options["dtype"]))
    edge_index = data.edge_index.to(device)
    graph = as_graph(
        edge_index, num_nodes=x.size(0), self_loops=bool(ablation.measure.get("self_loops"))
    )
    measure = ablation.measure.get("measure", "counting")
    wanted = set(depths)
    out: dict[int, Tensor] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)  # the dropout mask of train_mode, reproducible
        model.train(ablation.train_mode)
        ctx = model.context(edge_index, x.size(0))
        h = model.encode(x)
        for k, block in enumerate(model.blocks, start=1):
            h = block(h, ctx)
            if k in wanted:
                state = F.layer_norm(h, h.shape[-1:]) if ablation.measure.get("final_norm") else h
                out[k] = energy(state, graph, 2, measure)  # E_2, counting or degree
    return {k: float(v) for k, v in out.items()}  # one host sync per run, after the loop


def run_ablations(
    data: Any,
    ablations: Sequence[Ablation] | None = None,
    archs: Sequence[str] = ARCHS,
    seeds: Sequence[int] = (0, 1),
    depths: Sequence[int] | None = None,
    dtype: str = "float64",
    device: Any = "cpu",
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """Rows ``ablation, model, seed, depth, energy`` for every ablation x arch x seed
    (default: :data:`ABLATIONS` at :data:`DEPTHS`)."""
    import pandas as pd

    ablations = ABLATIONS if ablations is None else ablations
    rows = []
    total, done = len(ablations) * len(archs) * len(seeds), 0
    for ablation in ablations:
        for arch in archs:
            for seed in seeds:
                energies = final_energies(arch, data, ablation, seed, depths, dtype, device)
                rows += [
                    {
                        "ablation": ablation.name,
                        "model": arch,
                        "seed": seed,
                        "depth": d,
                        "energy": e,
                    }
                    for d, e in energies.items()
                ]
                done += 1
                if progress is not None:
                    progress(done, total, f"{ablation.name} {arch} seed {seed}")
    return pd.DataFrame(rows)


def _geomean(values: np.ndarray) -> float:
    v = np.asarray(values, dtype=float)
    if len(v) == 0 or not np.all(v > 0):
        return math.nan
    return float(np.exp(np.mean(np.log(v))))


def ablation_summary(frame: pd.DataFrame, paper: dict, dataset: str = "cora") -> pd.DataFrame:
    """Per ablation, model and depth: geometric mean over seeds, seed min and max, the paper's
    number and the ratio; plus per ablation and model the worst factor over the depths
    (``max(r, 1/r)``) and whether every depth is within :data:`WITHIN` x."""
    import pandas as pd

    rows = []
    for (name, arch, depth), part in frame.groupby(["ablation", "model", "depth"], sort=False):
        published = paper["final_energy_at_init"][arch][dataset]
        ref = published[paper["depths"].index(depth)] if depth in paper["depths"] else math.nan
        mean = _geomean(part["energy"].to_numpy())
        rows.append(
            {
                "ablation": name,
                "model": arch,
                "depth": int(depth),
                "geomean": mean,
                "min": float(part["energy"].min()),
                "max": float(part["energy"].max()),
                "paper": ref,
                "ratio": mean / ref if ref and math.isfinite(ref) else math.nan,
            }
        )
    table = pd.DataFrame(rows)
    factor = np.maximum(table["ratio"], 1.0 / table["ratio"])
    table["factor"] = factor
    worst = table.groupby(["ablation", "model"], sort=False)["factor"].transform(
        lambda f: f.max() if f.notna().all() else math.nan
    )
    table["worst_factor"] = worst
    table["within"] = worst <= WITHIN
    return table


def _worst(summary: pd.DataFrame, name: str, arch: str) -> float:
    part = summary[(summary["ablation"] == name) & (summary["model"] == arch)]
    return float(part["worst_factor"].iloc[0]) if len(part) else math.nan


def greedy_combination(
    data: Any,
    summary: pd.DataFrame,
    paper: dict,
    arch: str,
    seeds: Sequence[int] = (0, 1),
    dtype: str = "float64",
    device: Any = "cpu",
    max_steps: int = 4,
) -> dict:
    """Forward selection for one table: start from the single variant with the smallest worst
    factor, add the next-best variant that changes a different choice while it lowers the worst
    factor, at most ``max_steps`` additions.  Returns the chosen combination, its worst factor,
    its per-depth ratios and the tries (each a measured combination)."""
    import pandas as pd

    singles = [
        (_worst(summary, a.name, arch), a)
        for a in ABLATIONS
        if a is not BASELINE and math.isfinite(_worst(summary, a.name, arch))
    ]
    baseline = _worst(summary, BASELINE.name, arch)
    singles.sort(key=lambda t: t[0])
    candidates = [a for w, a in singles if w < baseline]
    if not candidates:
        return {"model": arch, "combination": None, "worst_factor": baseline, "tries": []}
    best, best_worst = candidates[0], _worst(summary, candidates[0].name, arch)
    best_rows = summary[(summary["ablation"] == best.name) & (summary["model"] == arch)]
    tries: list[dict] = []
    for extra in candidates[1:]:
        if len(tries) >= max_steps:
            break
        if best.keys() & extra.keys():
            continue  # the same choice twice (e.g. heads-1 and heads-8)
        combo = best + extra
        frame = run_ablations(data, [combo], [arch], seeds, None, dtype, device)
        rows = ablation_summary(frame, paper)
        worst = float(rows["worst_factor"].iloc[0])
        tries.append({"combination": combo.name, "worst_factor": worst})
        if worst < best_worst:
            best, best_worst, best_rows = combo, worst, rows
    return {
        "model": arch,
        "combination": best.name,
        "worst_factor": best_worst,
        "ratios": pd.DataFrame(best_rows)[["depth", "ratio"]].to_dict("records"),
        "tries": tries,
    }
