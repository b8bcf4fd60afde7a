"""What the main jobs run: :class:`AnalysisConfig` (``analyze``, ``prune``),
:class:`ComparisonConfig` (``compare``) and :class:`TrainConfig` (``train``).

Each holds one :class:`~oversmooth.config.ModelConfig` as ``config.model`` (the model fields
live there only) plus its own run fields.  Importing this module imports no torch, so the
CLI reads the defaults for its help without it; constructing a config validates it, which
may load the metric and pruning checks (and torch with them).

A run config's ``model`` is the model of its first run: a field the run sets itself (the
seed from ``seeds``; a comparison's name, conv and depth from its lists) holds that run's
value, and a different value given for it is refused rather than silently replaced.
:mod:`oversmooth.analysis` and :mod:`oversmooth.train` re-export these classes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from oversmooth.config import (
    check_repeats,
    is_seed,
    SEED_RANGE,
    DERIVED,
    MAX_DEPTH,
    SPLITS,
    ModelConfig,
    default_of,
    option,
    resolve_floor_method,
    set_by_run,
    check_layers,
)
from oversmooth.registry import CONVS, DEFAULT_METRICS, MODELS, known_metric

__all__ = [
    "AnalysisConfig",
    "ComparisonConfig",
    "TrainConfig",
    "check_seeds",
    "check_depth",
    "comparison_key",
]


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """``seeds`` as a tuple: one or more distinct integers >= 0."""
    seeds = tuple(seeds)
    if not seeds or not all(is_seed(s) for s in seeds):
        raise ValueError(
            f"seeds: expected one or more integers in {SEED_RANGE}, received {list(seeds)}"
        )
    check_repeats("seeds", seeds, "seed")
    return seeds


def comparison_key(dataset: str, model: str, conv: str, convs: Sequence[str]) -> str:
    """The fits.json key of one curve of a comparison: ``dataset/model``, then ``/conv`` when
    the comparison has several message-passing types (``convs``)."""
    return f"{dataset}/{model}" if len(convs) == 1 else f"{dataset}/{model}/{conv}"


def check_depth(depth: int, name: str = "depth") -> None:
    """``depth`` is an integer in [1, MAX_DEPTH]; ``name``: the field the error names."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"{name}: expected an integer in [1, {MAX_DEPTH}], received {depth!r}")


def _check_model(model: object) -> None:
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model: expected a ModelConfig (oversmooth.config), received {model!r}")


def _check_metrics(names: Sequence[str]) -> list[str]:
    """``names`` as a list when every one is a metric a probe accepts
    (:func:`~oversmooth.registry.known_metric`), without importing torch (``oversmooth report``
    validates the config of the folder it rebuilds); otherwise the probe's own check raises its
    ``ValueError`` (or ``ResourceError``, for an energy order above 1000)."""
    if all(known_metric(name) for name in names):
        return list(names)
    from oversmooth.metrics import check_metrics

    return check_metrics(names)


@dataclass(frozen=True)
class AnalysisConfig:
    """One architecture at one depth, probed over one or more seeds.

    ``model``: the architecture (its ``seed`` is the first of ``seeds``; ``in_channels`` and
    ``out_channels`` are set from the dataset).  ``metrics``: the per-layer metrics (empty:
    the probe's defaults; ``laplacian_energy`` is always recorded).  ``floor``: the float
    floor method, ``auto``, ``shadow``, ``twin`` or ``bound`` (:attr:`floor_method` is the
    one it resolves to).
    """

    GRID: ClassVar[Mapping[str, str]] = {"seed": "seeds"}

    # Post-LN SAN at depth 256 in float64: the seed paper's oversmoothing case, resolved by
    # float64 down to ~1e-30 (float32 stops at its rounding floor; see oversmooth.precision)
    model: ModelConfig = field(
        default_factory=lambda: ModelConfig("postln", depth=256, dtype="float64")
    )
    dataset: str = "cora"
    # five seeds by default: each is a draw of the architecture's weights, and the verdict's
    # intervals carry the between-seed variation (Student t on seeds - 1 degrees of freedom when
    # it dominates).  Measured at depth 256 on Cora: with 3 seeds the fitted change of Pre-LN
    # (+0.76 +- 1.86 decades) and nonlocal (-1.27 +- 3.44) is not even a trend; with 5 all
    # three zoo models have a decided trend (docs/verdict.md, "Seeds and defaults")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    device: str = "auto"
    similarity: bool = True
    prune: tuple[int, ...] = ()
    metrics: tuple[str, ...] = ()
    data_root: str | None = None
    checkpoint: str | None = None  # analyse these trained weights instead of a fresh initialisation
    floor: str = "auto"

    def __post_init__(self) -> None:
        _check_model(self.model)
        seeds = check_seeds(self.seeds)
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(
            self, "model", set_by_run(self.model, "an analysis", seed=("seeds", seeds[0]))
        )
        check_depth(self.model.depth)
        resolve_floor_method(self.floor, self.model.dtype)
        prune = tuple(check_layers(list(self.prune), self.model.depth)) if self.prune else ()
        object.__setattr__(self, "prune", prune)
        if self.prune and CONVS[self.model.conv].elements == "edges":
            raise ValueError(
                f"prune: expected a node-level conv, received conv={self.model.conv!r} (its "
                "blocks run over edges; pruning is not implemented for it); choose a node-level "
                "--conv (san, gcn, gat), or drop --prune-layers from analyze"
            )
        check_repeats("metrics", tuple(self.metrics), "metric")
        metrics = tuple(_check_metrics(self.metrics or DEFAULT_METRICS))
        if "laplacian_energy" not in metrics:
            metrics = ("laplacian_energy",) + metrics
        object.__setattr__(self, "metrics", metrics)

    @property
    def floor_method(self) -> str:
        """The float floor method the run uses: ``auto`` resolved for the model's dtype."""
        return resolve_floor_method(self.floor, self.model.dtype)

    def model_for(self, in_channels: int, out_channels: int, seed: int) -> ModelConfig:
        """The model of one run: this config's, on data of that size, with that seed."""
        return dataclasses.replace(
            self.model, in_channels=in_channels, out_channels=out_channels, seed=seed
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def fixed_by_checkpoint(field: str) -> bool:
        """Whether a checkpoint fixes the dotted ``field``: every model field but ``dtype``
        (and those set from the data), the dataset and the seeds."""
        if field.startswith("model."):
            return field not in (*DERIVED, "model.dtype")
        return field in ("dataset", "seeds")

    @classmethod
    def from_checkpoint(cls, path: str, values: Mapping[str, Any] | None = None) -> AnalysisConfig:
        """The analysis of a trained checkpoint: its model, dataset and seed.

        ``values`` (dotted field paths, ``{"model.dtype": "float32", "similarity": False}``)
        set the rest; a given value of a field the checkpoint fixes (every model field but
        ``dtype``, the dataset, the seeds) must agree with it: a different value is refused,
        never silently replaced.  The model runs in ``model.dtype`` (default float64,
        whatever precision it was trained in).
        """
        from oversmooth.checkpoint import CheckpointError, load_checkpoint

        trained, meta = load_checkpoint(path, map_location="cpu")
        cfg: ModelConfig = trained.config
        fixed: dict[str, Any] = {
            f"model.{name}": value
            for name, value in cfg.to_dict().items()
            if cls.fixed_by_checkpoint(f"model.{name}")
        }
        fixed.update(dataset=meta.get("dataset", "cora"), seeds=(cfg.seed,))
        values = dict(values or {})
        values.pop("checkpoint", None)  # it is ``path``
        for name, given in values.items():
            if name in fixed and given is not None and _tuple(given) != fixed[name]:
                have, flag = fixed[name], option(name).flag
                shown = ",".join(map(str, given)) if isinstance(given, (list, tuple)) else given
                leaf = flag.removeprefix("--")
                have = have[0] if name == "seeds" else have
                raise CheckpointError(
                    f"{path}: the checkpoint has {leaf}={have!r} but {flag} {shown} was given; "
                    f"drop {flag} or use a checkpoint trained with it"
                )
        dtype = values.pop("model.dtype", None) or default_of(cls, "model.dtype")
        run = {k: v for k, v in values.items() if k not in fixed}
        return cls(
            model=dataclasses.replace(cfg, dtype=dtype),
            dataset=fixed["dataset"],
            seeds=fixed["seeds"],
            checkpoint=str(path),
            **run,
        )


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class ComparisonConfig:
    """Several architectures x message-passing types x depths x datasets x seeds (the seed
    paper's Tables 2/4/6).

    ``model``: every other model field, shared by all runs (its name, conv, depth and seed
    are the first run's).
    """

    GRID: ClassVar[Mapping[str, str]] = {
        "name": "models",
        "conv": "convs",
        "depth": "depths",
        "seed": "seeds",
    }

    models: tuple[str, ...] = ("preln", "postln", "nonlocal")
    convs: tuple[str, ...] = ("san",)
    depths: tuple[int, ...] = (2, 32, 64, 128, 256)
    datasets: tuple[str, ...] = ("cora",)
    seeds: tuple[int, ...] = AnalysisConfig.seeds  # the same replicates as analyze (see there)
    model: ModelConfig = field(default_factory=lambda: ModelConfig(dtype="float64"))
    device: str = "auto"
    data_root: str | None = None
    floor: str = "auto"

    def __post_init__(self) -> None:
        _check_model(self.model)
        if not self.models or not self.convs or not self.depths or not self.datasets:
            raise ValueError("models, convs, depths, datasets: expected at least one value each")
        for m in self.models:
            MODELS.resolve(m, kind="models")
        for c in self.convs:
            CONVS.resolve(c, kind="convs")
        for d in self.depths:
            check_depth(d, "depths")  # the option is --depths (it said --depth)
        for name in ("models", "convs", "depths", "datasets"):
            check_repeats(name, tuple(getattr(self, name)))
        seeds = check_seeds(self.seeds)
        depths = tuple(sorted(set(self.depths)))
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "depths", depths)
        first = {
            "name": ("models", self.models[0]),
            "conv": ("convs", self.convs[0]),
            "depth": ("depths", depths[0]),
            "seed": ("seeds", seeds[0]),
        }
        object.__setattr__(self, "model", set_by_run(self.model, "a comparison", **first))
        resolve_floor_method(self.floor, self.model.dtype)
        for m in self.models:
            for c in self.convs:  # validates sizes and names at the deepest depth
                self.analysis(m, c, depths[-1], self.datasets[0])

    @property
    def floor_method(self) -> str:
        """The float floor method the runs use: ``auto`` resolved for the model's dtype."""
        return resolve_floor_method(self.floor, self.model.dtype)

    def analysis(self, model: str, conv: str, depth: int, dataset: str) -> AnalysisConfig:
        """The analysis of one run: this config's model with the run's name, conv and depth."""
        return AnalysisConfig(
            model=dataclasses.replace(
                self.model, name=model, conv=conv, depth=depth, seed=self.seeds[0]
            ),
            dataset=dataset,
            seeds=self.seeds,
            device=self.device,
            data_root=self.data_root,
            floor=self.floor,
            similarity=False,
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig:
    """One model trained with the seed paper's recipe (:mod:`oversmooth.train`).

    ``model``: the architecture (its ``seed`` also seeds the random split and the dropout;
    ``in_channels`` and ``out_channels`` are set from the dataset).
    """

    GRID: ClassVar[Mapping[str, str]] = {}

    # the nonlocal model (the seed paper's method) at depth 64, trained in float32
    model: ModelConfig = field(default_factory=lambda: ModelConfig("nonlocal", depth=64))
    dataset: str = "cora"
    epochs: int = 5000
    lr: float | None = None  # default: 1e-4 peak (postln, nonlocal), 1e-3 (every other model)
    warmup: int | None = None  # default: epochs // 10 for Post-LN, 0 otherwise
    weight_decay: float = 5e-4
    split: str = "random"
    patience: int | None = None
    device: str = "auto"
    data_root: str | None = None
    deterministic: bool = True  # deterministic kernels: bit-reproducible on CPU for a fixed seed
    probe_every: int | None = None  # record layer energies every N epochs; 0 off; None: auto

    def __post_init__(self) -> None:
        _check_model(self.model)
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs: expected an integer >= 1, received {self.epochs!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 10):
            raise ValueError(f"lr: expected a learning rate in (0, 10), received {self.lr!r}")
        if self.warmup is not None and (not isinstance(self.warmup, int) or self.warmup < 0):
            raise ValueError(f"warmup: expected an integer >= 0 (epochs), received {self.warmup!r}")
        if not isinstance(self.weight_decay, (int, float)) or not 0 <= self.weight_decay < math.inf:
            raise ValueError(
                f"weight_decay: expected a finite number >= 0, received {self.weight_decay!r}"
            )
        if not isinstance(self.deterministic, bool):
            raise ValueError(
                "deterministic: expected a boolean (true or false), "
                f"received {self.deterministic!r}"
            )
        if self.split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, received {self.split!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(
                f"patience: expected an integer >= 1 (epochs), received {self.patience!r}"
            )
        if self.probe_every is not None and (
            isinstance(self.probe_every, bool)
            or not isinstance(self.probe_every, int)
            or self.probe_every < 0
        ):
            raise ValueError(
                f"probe_every: expected an integer >= 0 (epochs; 0 turns the probe off), "
                f"received {self.probe_every!r}"
            )

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return float(self.lr)
        return 1e-4 if MODELS[self.model.name].post_ln else 1e-3

    @property
    def warmup_epochs(self) -> int:
        if self.warmup is not None:
            return self.warmup
        return max(1, self.epochs // 10) if MODELS[self.model.name].post_ln else 0

    @property
    def probe_interval(self) -> int:
        """Epochs between two recorded probe passes (0: none); default ``max(1, epochs // 50)``."""
        if self.probe_every is not None:
            return self.probe_every
        return max(1, self.epochs // 50)

    def model_for(self, in_channels: int, out_channels: int) -> ModelConfig:
        """The model to train on data of that size."""
        return dataclasses.replace(self.model, in_channels=in_channels, out_channels=out_channels)

    def to_dict(self) -> dict:
        return asdict(self)
