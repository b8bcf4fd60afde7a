"""oversmooth: diagnose oversmoothing and the curse of depth in deep GNNs.

Importing the package does no I/O and does not import matplotlib's pyplot.
"""

import os as _os
import sys as _sys
from typing import TYPE_CHECKING

from oversmooth.version import __version__


def _interrupted_at_start_up(signum: int, frame: object) -> None:
    terminated = signum != 2  # SIGINT is 2 everywhere; the other one handled is SIGTERM
    _os.write(2, b"terminated\n" if terminated else b"interrupted\n")
    _os._exit(143 if terminated else 130)


# Run as the `oversmooth` command, a Ctrl-C (SIGTERM) while this package and the CLI are still
# being imported (before the command's own handling starts, in oversmooth.cli.main.main) is one
# line and exit 130 (143), not a traceback (or a silent death by SIGTERM): nothing has been
# written yet, so there is nothing to clean up.
_ORIG = list(getattr(_sys, "orig_argv", []))
if _os.path.basename(_sys.argv[0] if _sys.argv else "") in ("oversmooth", "oversmooth.exe") or (
    _ORIG[1:3] == ["-m", "oversmooth"]  # python -m oversmooth (argv[0] is "-m" while it imports)
):
    import signal as _signal

    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)
    if _signal.getsignal(_signal.SIGTERM) is not _signal.SIG_IGN:  # SIGTERM likewise (143)
        _signal.signal(_signal.SIGTERM, _interrupted_at_start_up)
    # numpy's and scipy's OpenBLAS take their thread count from the environment when they
    # load (numpy's below, with oversmooth.verdict): one thread, unless the user set one.  The
    # command's numpy and scipy work (the verdict's fits, the spectral step) is small or
    # vector-sized; a second thread only spins (docs/analyze.md, "Threads").  Torch (MKL and
    # OpenMP) does not read this variable.
    _os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if TYPE_CHECKING:  # the names below, for type checkers; at run time they load on first use
    from oversmooth.graph import GraphOperator, as_graph
    from oversmooth.metrics import (
        angular_distance,
        dirichlet_energy,
        effective_rank,
        energy,
        feature_norm,
        laplacian_energy,
        laplacian_energy_degree,
        layer_similarity,
        mean_average_distance,
        mean_average_distance_global,
        mean_cosine_similarity,
        normalized_dirichlet_energy,
        rank_one_distance,
        rayleigh_energy,
        relative_energy,
        relative_update,
        rusch_dirichlet_energy,
        stream_variance,
    )
    from oversmooth.config import ModelConfig
    from oversmooth.nn import DepthModel, build_model
    from oversmooth.notebook import plot, write_report
    from oversmooth.probe import Probe, available_metrics
    from oversmooth.prune import prune_sensitivity
    from oversmooth.report.prose import verdict_text
    from oversmooth.spectral import SpectralGap, spectral_gap

# `verdict` is also the name of its module: imported here, so that importing the submodule
# later (which sets the package attribute) finds the function already bound to the name.
from oversmooth.verdict import Verdict, verdict  # noqa: E402  (numpy only, no torch)

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
    "laplacian_energy_degree",
    "layer_similarity",
    "rayleigh_energy",
    "mean_average_distance",
    "mean_average_distance_global",
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
    "verdict_text",
    "plot",
    "write_report",
]

# Every public name loads its module on first use (PEP 562), so that `import oversmooth` (and
# with it `oversmooth --help`) does not import torch; `from oversmooth import Probe` works as
# always.  oversmooth.notebook reaches oversmooth.analysis, which reads __version__ from here:
# loading by name once the package is initialised also keeps the import graph free of cycles.
_LAZY = {
    "GraphOperator": "oversmooth.graph",
    "as_graph": "oversmooth.graph",
    "DepthModel": "oversmooth.nn",
    "ModelConfig": "oversmooth.config",
    "build_model": "oversmooth.nn",
    "Probe": "oversmooth.probe",
    "available_metrics": "oversmooth.probe",
    "prune_sensitivity": "oversmooth.prune",
    "SpectralGap": "oversmooth.spectral",
    "spectral_gap": "oversmooth.spectral",
    "plot": "oversmooth.notebook",
    "write_report": "oversmooth.notebook",
    "verdict_text": "oversmooth.report.prose",  # the verdict in words (the write layer)
}
_EAGER = {"__version__", "Verdict", "verdict"}  # bound above
_LAZY.update(  # the rest of __all__ are the metric functions
    (name, "oversmooth.metrics") for name in __all__ if name not in _LAZY and name not in _EAGER
)


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    if not name.startswith("_"):  # a submodule not imported yet (oversmooth.metrics, ...)
        import importlib.util

        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'oversmooth' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
