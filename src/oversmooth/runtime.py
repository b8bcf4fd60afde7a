"""Where and with what a run executes: the device it resolves to and the environment it
records (versions, machine, device, git commit) in ``config.json``."""

from __future__ import annotations

import platform

import numpy as np
import torch

from oversmooth.config import DTYPE_NAMES

__all__ = ["DTYPES", "resolve_device", "resolve_dtype", "environment"]


def resolve_device(device: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device: {device!r} asked for, but CUDA is not available on this "
                "machine; use --device cpu"
            )
        return torch.device(device)
    raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, received {device!r}")


# the precision names are a config choice (oversmooth.config, torch-free)
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


def resolve_dtype(name: str) -> torch.dtype:
    """``float32`` or ``float64`` -> the torch dtype (the one resolver for precision names)."""
    if name not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, received {name!r}")
    return DTYPES[name]


def environment(device: torch.device) -> dict:
    """Versions, machine and device, for config.json."""
    from importlib.metadata import PackageNotFoundError, version

    import pandas
    import scipy

    from oversmooth.version import __version__, commit

    try:  # its version without importing it (seconds) when the run never needed it
        pyg_version: str | None = version("torch_geometric")
    except PackageNotFoundError:
        pyg_version = None

    env = {
        "oversmooth": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_geometric": pyg_version,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pandas": pandas.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "git_commit": commit(),  # recorded at build time, or git's for a checkout
    }
    if device.type == "cuda":
        env["cuda_device"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env
