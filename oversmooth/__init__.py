"""oversmooth: diagnose oversmoothing and the curse of depth in deep GNNs.

Importing the package does no I/O and does not import matplotlib's pyplot.
"""

from oversmooth.graph import GraphOperator, as_graph
from oversmooth.nn import DepthModel, ModelConfig, build_model
from oversmooth.probe import Probe, available_metrics
from oversmooth.prune import prune_sensitivity
from oversmooth.spectral import SpectralGap, spectral_gap
from oversmooth.verdict import Verdict, verdict
from oversmooth.metrics import (
    dirichlet_energy,
    effective_rank,
    energy,
    feature_norm,
    laplacian_energy,
    layer_similarity,
    rayleigh_energy,
    mean_average_distance,
    mean_cosine_similarity,
    normalized_dirichlet_energy,
    rank_one_distance,
    relative_energy,
    relative_update,
    rusch_dirichlet_energy,
    stream_variance,
    angular_distance,
)

__version__ = "0.1.0"

# oversmooth.plot / oversmooth.write_report load oversmooth.notebook on first use (PEP 562):
# it reaches pandas, matplotlib and oversmooth.analysis, which reads __version__ from here, so
# it is loaded by name only once the package is fully initialised (no import-time cycle).
_LAZY = {"plot": "oversmooth.notebook", "write_report": "oversmooth.notebook"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'oversmooth' has no attribute {name!r}")


__all__ = [
    "__version__",
    "GraphOperator",
    "as_graph",
    "DepthModel",
    "ModelConfig",
    "build_model",
    "Probe",
    "available_metrics",
    "prune_sensitivity",
    "SpectralGap",
    "spectral_gap",
    "dirichlet_energy",
    "effective_rank",
    "energy",
    "feature_norm",
    "laplacian_energy",
    "layer_similarity",
    "rayleigh_energy",
    "mean_average_distance",
    "mean_cosine_similarity",
    "relative_energy",
    "rusch_dirichlet_energy",
    "normalized_dirichlet_energy",
    "rank_one_distance",
    "stream_variance",
    "angular_distance",
    "relative_update",
    "Verdict",
    "verdict",
    "plot",
    "write_report",
]
