"""The command line that reproduces a report folder, built from its ``config.json``.

Only options whose value differs from the command's default are written, so the line is
short; passing it to the CLI gives back the same configuration.
"""

from __future__ import annotations

import shlex
from dataclasses import fields
from typing import Any
from collections.abc import Mapping

__all__ = ["reproduce_command"]

# config key -> CLI option (analyze; booleans are --name/--no-name switches)
_ANALYZE = {
    "checkpoint": "--checkpoint",
    "model": "--model",
    "depth": "--depth",
    "conv": "--conv",
    "dataset": "--dataset",
    "hidden": "--hidden",
    "heads": "--heads",
    "seeds": "--seeds",
    "norm": "--norm",
    "pattern": "--pattern",
    "similarity": "--similarity",
    "prune": "--prune-layers",
    "metrics": "--metrics",
    "dtype": "--dtype",
    "floor": "--floor",
    "device": "--device",
    "data_root": "--data-root",
}
# what a checkpoint fixes: not repeated on the command line of a checkpoint run
_FROM_CHECKPOINT = ("model", "depth", "conv", "dataset", "hidden", "heads", "seeds", "norm")
_COMPARE = {
    "models": "--models",
    "depths": "--depths",
    "conv": "--conv",
    "datasets": "--datasets",
    "seeds": "--seeds",
    "hidden": "--hidden",
    "heads": "--heads",
    "norm": "--norm",
    "pattern": "--pattern",
    "dtype": "--dtype",
    "floor": "--floor",
    "device": "--device",
    "data_root": "--data-root",
}

_TRAIN = {
    "model": "--model",
    "depth": "--depth",
    "conv": "--conv",
    "dataset": "--dataset",
    "hidden": "--hidden",
    "heads": "--heads",
    "seed": "--seed",
    "epochs": "--epochs",
    "lr": "--lr",
    "warmup": "--warmup",
    "weight_decay": "--weight-decay",
    "split": "--split",
    "patience": "--patience",
    "dropout": "--dropout",
    "norm": "--norm",
    "pattern": "--pattern",
    "device": "--device",
    "data_root": "--data-root",
    "deterministic": "--deterministic",
    "probe_every": "--probe-every",
}


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return [str(x) for x in a] == [str(x) for x in b]
    return a == b


def _options(config: Mapping[str, Any], names: Mapping[str, str], defaults: dict) -> list[str]:
    out: list[str] = []
    for key, option in names.items():
        if key not in config or _same(config[key], defaults.get(key)):
            continue
        value = config[key]
        if isinstance(value, bool):
            flag = option.removeprefix("--")
            out.append(f"--{flag}" if value else f"--no-{flag}")
        elif value is None:
            continue
        else:
            out += [option, _value(value)]
    return out


def reproduce_command(config: Mapping[str, Any]) -> str:
    """``oversmooth analyze ...`` / ``compare ...`` / ``train ...`` for a folder's config.json.

    Raises ValueError for a configuration no single command wrote (reproduce, bench and sweep
    folders have their own records)."""
    from oversmooth.analysis import AnalysisConfig, ComparisonConfig
    from oversmooth.probe import DEFAULT_METRICS

    command = config.get("command")
    if command in ("analyze", "prune"):
        defaults = {f.name: f.default for f in fields(AnalysisConfig)}
        names = dict(_ANALYZE)
        if config.get("checkpoint"):
            for key in _FROM_CHECKPOINT:
                names.pop(key)
        shown = dict(config)
        # --metrics names the extra metrics; the defaults are always recorded
        metrics = [m for m in config.get("metrics") or () if m not in DEFAULT_METRICS]
        if metrics:
            shown["metrics"] = metrics
        else:
            shown.pop("metrics", None)
        parts = ["oversmooth", "analyze", *_options(shown, names, defaults)]
    elif command == "compare":
        defaults = {f.name: f.default for f in fields(ComparisonConfig)}
        parts = ["oversmooth", "compare", *_options(config, _COMPARE, defaults)]
    elif command == "train":
        from oversmooth.train import TrainConfig

        defaults = {f.name: f.default for f in fields(TrainConfig)}
        parts = ["oversmooth", "train", *_options(config, _TRAIN, defaults)]
    else:
        raise ValueError(
            f"config command {command!r}: expected analyze, prune, compare or train to build a "
            "command"
        )
    return shlex.join(parts)
