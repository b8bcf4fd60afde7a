"""``oversmooth metrics``: the measures the toolkit records, with their formulas."""

from __future__ import annotations

from typing import Annotated

import typer

from oversmooth.cli._common import handle_errors

METRIC_HELP = {
    "laplacian_energy": "E2 = (1/n) ||PX - X||_F^2, P = D^-1 W (default energy; measure='degree' weights by d_i)",
    "dirichlet_energy": "E1 = (1/n) * 1/2 sum_ij w_ij ||X_j - X_i||^2",
    "energy(order=m)": "E_2k = (1/n) int |Delta^k X|^2 dmu, E_2k+1 = (1/n) int |grad Delta^k X|^2 dmu",
    "relative_energy": "R(X^k) = (E(X^k) - E(X^k-1)) / E(X^k-1); -> 0 is the curse of depth",
    "cosine_prev": "sim(X^k-1, X^k) = (1/n) sum_i cos(X^k-1_i, X^k_i)",
    "layer_similarity": "L x L matrix of sim(X^s, X^t)",
    "rusch_dirichlet_energy": "sqrt((1/n) sum_i sum_{j in N_i} ||X_i - X_j||^2) (Rusch et al. 2023)",
    "mean_average_distance": "(1/n') sum_i mean_{j in N_i} (1 - cos(X_i, X_j)); 'global' over all pairs",
    "effective_rank": "exp(entropy of normalised singular values of X - mean)",
    "feature_norm": "sqrt((1/n) ||X||_F^2)",
}


def metrics(
    names_only: Annotated[bool, typer.Option("--names", help="Print only the names, one per line.")] = False,
) -> None:
    """List the per-layer measures and their definitions (all accumulate in float64)."""
    handle_errors(_print)(names_only)


def _print(names_only: bool) -> None:
    width = max(map(len, METRIC_HELP))
    for name, text in METRIC_HELP.items():
        typer.echo(name if names_only else f"{name:<{width}}  {text}")
