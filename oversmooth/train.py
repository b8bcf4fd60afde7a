"""Training with the seed paper's recipe (Appendix B.1) and safe checkpoints.

Recipe: Adam, weight decay 5e-4, hidden width 32, full-batch node
classification on a random 60/20/20 split; Pre-LN models (``preln``,
``nonlocal-preln``, ``plain``) at a fixed learning rate 1e-3, Post-LN models
(``postln``, ``nonlocal``) with a linear warm-up to 1e-4 (over the first tenth
of the epochs unless ``warmup`` says otherwise; the paper does not give the
length).  The checkpoint with the best validation accuracy (ties: lower
validation loss) is kept, and its train/validation/test accuracies reported.

An output folder holds ``best.pt`` (best checkpoint), ``last.pt`` (everything
needed to resume: weights, optimiser, scheduler, RNG state, history),
``config.json``, ``history.csv`` and, once finished, ``summary.json`` and
``training.png``.  Checkpoint files are plain dicts of tensors and numbers,
written atomically and read back with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from oversmooth.nn.model import MODELS, DepthModel, ModelConfig, model_from_config

__all__ = ["TrainConfig", "TrainResult", "train", "save_checkpoint", "load_checkpoint", "CheckpointError", "TrainingDiverged"]

FORMAT = "oversmooth-checkpoint"
FORMAT_VERSION = 1
POST_LN = {"postln", "nonlocal"}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not match what it is used for."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""

    clean_message = True


@dataclass(frozen=True)
class TrainConfig:
    model: str = "nonlocal"
    depth: int = 64
    conv: str = "san"
    dataset: str = "cora"
    hidden: int = 32
    heads: int = 4
    seed: int = 0
    epochs: int = 5000
    lr: float | None = None  # default: 1e-3 (Pre-LN), 1e-4 peak (Post-LN)
    warmup: int | None = None  # default: epochs // 10 for Post-LN, 0 otherwise
    weight_decay: float = 5e-4
    split: str = "random"
    patience: int | None = None
    dropout: float = 0.5
    norm: str = "node"
    pattern: str = "M"
    ffn: int | None = None
    device: str = "auto"
    data_root: str | None = None

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model: expected one of {', '.join(MODELS)}, received {self.model!r}")
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs: expected an integer >= 1, received {self.epochs!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 10):
            raise ValueError(f"lr: expected a positive learning rate, received {self.lr!r}")
        if self.warmup is not None and (not isinstance(self.warmup, int) or self.warmup < 0):
            raise ValueError(f"warmup: expected an integer >= 0 (epochs), received {self.warmup!r}")
        if not isinstance(self.weight_decay, (int, float)) or self.weight_decay < 0:
            raise ValueError(f"weight_decay: expected a number >= 0, received {self.weight_decay!r}")
        if self.split not in ("random", "public"):
            raise ValueError(f"split: expected one of random, public, received {self.split!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(f"patience: expected an integer >= 1 (epochs), received {self.patience!r}")
        self.model_config(1, 1)  # validates depth, conv, sizes, pattern

    @property
    def learning_rate(self) -> float:
        return float(self.lr) if self.lr is not None else (1e-4 if self.model in POST_LN else 1e-3)

    @property
    def warmup_epochs(self) -> int:
        if self.warmup is not None:
            return self.warmup
        return max(1, self.epochs // 10) if self.model in POST_LN else 0

    def model_config(self, in_channels: int, out_channels: int) -> ModelConfig:
        return ModelConfig(
            name=self.model, conv=self.conv, depth=self.depth, in_channels=in_channels, out_channels=out_channels,
            hidden=self.hidden, heads=self.heads, seed=self.seed, ffn=self.ffn, dropout=self.dropout,
            norm=self.norm, pattern=self.pattern,
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrainResult:
    out: Path
    best_epoch: int
    best: dict  # train_acc, val_acc, test_acc, val_loss at the best epoch
    epochs_run: int
    stopped: str  # finished | early-stopped | interrupted
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


# ----------------------------------------------------------------------------- checkpoints


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path: str | os.PathLike, model: DepthModel, meta: dict) -> None:
    """Weights plus the model config and ``meta`` (dataset, split, accuracies...), atomically."""
    _atomic_save({"format": FORMAT, "version": FORMAT_VERSION, "model_config": model.config.to_dict(),
                  "state_dict": model.state_dict(), "meta": meta}, Path(path))


def _read(path: Path, map_location) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure here means an unreadable file
        raise CheckpointError(
            f"{path}: not a readable oversmooth checkpoint ({type(exc).__name__}: the file is corrupted, truncated, "
            "or not a weights-only torch file); retrain or restore it"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an oversmooth checkpoint (no '{FORMAT}' marker); train one with `oversmooth train`")
    if obj.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {obj.get('version')} is not supported (expected {FORMAT_VERSION})")
    return obj


def load_checkpoint(path: str | os.PathLike, map_location=None, expect: dict | None = None) -> tuple[DepthModel, dict]:
    """Rebuild the model of a checkpoint and load its weights.

    Args:
        expect: fields that must match, e.g. ``{"model": "nonlocal", "dataset": "cora"}``
            (model-config fields or ``dataset``); a mismatch raises one clear
            :class:`CheckpointError` naming it.

    Returns:
        ``(model in eval mode, meta)``.
    """
    path = Path(path)
    obj = _read(path, map_location)
    meta = obj.get("meta", {})
    config_dict = dict(obj["model_config"])
    for key, wanted in (expect or {}).items():
        have = meta.get("dataset") if key == "dataset" else config_dict.get(key if key != "model" else "name")
        if wanted is not None and have != wanted:
            raise CheckpointError(f"{path}: checkpoint has {key}={have!r} but {key}={wanted!r} was asked for; drop the option or use a matching checkpoint")
    try:
        config = ModelConfig(**config_dict)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its model config is invalid ({exc})") from None
    model = model_from_config(config, map_location)
    try:
        model.load_state_dict(obj["state_dict"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(f"{path}: weights do not match the architecture in the checkpoint ({first[:160]})") from None
    model.eval()
    return model, meta


# ----------------------------------------------------------------------------- training


def _accuracy(logits, y, mask) -> float:
    return float((logits[mask].argmax(1) == y[mask]).double().mean()) if int(mask.sum()) else float("nan")


def train(
    config: TrainConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[int, int, dict], None] | None = None,
) -> TrainResult:
    """Train ``config`` into the folder ``out`` (see the module docstring).

    ``resume=True`` continues from ``out/last.pt`` up to ``config.epochs``.
    Ctrl-C saves ``last.pt`` and returns with ``stopped="interrupted"``; a NaN
    loss raises :class:`TrainingDiverged` after keeping the last good checkpoint.
    """
    from oversmooth.analysis import resolve_device
    from oversmooth.data import load, split_masks

    out = Path(out)
    if resume:
        if not (out / "last.pt").is_file():
            raise FileNotFoundError(f"--resume: {out / 'last.pt'} not found; start a new run without --resume")
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"--out: {out} already exists; pass --resume to continue it or --overwrite to start over")
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(config.device)
    data = load(config.dataset, data_root=config.data_root)
    if getattr(data, "y", None) is None:
        raise ValueError(f"dataset: {config.dataset!r} has no labels to train on")
    num_classes = int(data.y.max()) + 1
    masks = split_masks(data, config.split, seed=config.seed)
    x, edge_index, y = data.x.to(device), data.edge_index.to(device), data.y.to(device)
    edge_weight = getattr(data, "edge_weight", None)  # used by every forward when present
    edge_weight = None if edge_weight is None else edge_weight.to(device)
    masks = {k: v.to(device) for k, v in masks.items()}
    model = model_from_config(config.model_config(data.num_features, num_classes), device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    warm = config.warmup_epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: min(1.0, (e + 1) / warm) if warm > 0 else 1.0)
    meta = {"dataset": config.dataset, "split": config.split, "split_seed": config.seed, "num_features": data.num_features,
            "num_classes": num_classes, "train_config": config.to_dict()}
    history: list[dict] = []
    start_epoch, best, best_epoch, bad_epochs = 0, None, -1, 0
    rng = torch.Generator().manual_seed(config.seed)
    if resume:
        state = _read(out / "last.pt", device)
        saved = state["meta"]["train_config"]
        for key in ("model", "depth", "conv", "dataset", "hidden", "heads", "seed", "split", "norm", "pattern"):
            if saved.get(key) != getattr(config, key):
                raise CheckpointError(
                    f"--resume: {out / 'last.pt'} was trained with {key}={saved.get(key)!r}, not {getattr(config, key)!r}; "
                    "pass the same options or start a new --out"
                )
        model.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        rng.set_state(state["rng"])
        start_epoch = int(state["epoch"]) + 1
        history = list(state["history"])
        best, best_epoch, bad_epochs = state["best"], int(state["best_epoch"]), int(state["bad_epochs"])
    (out / "config.json").write_text(json.dumps({"command": "train", **config.to_dict(), "learning_rate": config.learning_rate,
                                                 "warmup_epochs": warm, "device_resolved": str(device)}, indent=2) + "\n")

    def save_last(epoch: int) -> None:
        _atomic_save({"format": FORMAT, "version": FORMAT_VERSION, "model_config": model.config.to_dict(),
                      "state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(), "rng": rng.get_state(), "epoch": epoch,
                      "history": history, "best": best, "best_epoch": best_epoch, "bad_epochs": bad_epochs,
                      "meta": meta}, out / "last.pt")

    started = time.perf_counter()
    stopped, epoch = "finished", start_epoch - 1
    try:
        for epoch in range(start_epoch, config.epochs):
            model.train()
            optimizer.zero_grad(set_to_none=True)
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=rng)))  # dropout stream, resumable
                logits = model(x, edge_index, edge_weight=edge_weight)
            loss = F.cross_entropy(logits[masks["train_mask"]], y[masks["train_mask"]])
            if not torch.isfinite(loss):
                save_last(epoch - 1) if epoch > start_epoch else None
                where = f"best checkpoint (epoch {best_epoch}) kept in {out / 'best.pt'}" if best is not None else "no checkpoint was saved yet"
                raise TrainingDiverged(f"training stopped: the loss became {float(loss.detach())} at epoch {epoch}; {where}; try a lower --lr or a longer --warmup")
            loss.backward()
            optimizer.step()
            scheduler.step()
            model.eval()
            with torch.no_grad():
                logits = model(x, edge_index, edge_weight=edge_weight)
                val_loss = float(F.cross_entropy(logits[masks["val_mask"]], y[masks["val_mask"]]))
            row = {"epoch": epoch, "loss": float(loss.detach()), "val_loss": val_loss, "lr": optimizer.param_groups[0]["lr"],
                   **{f"{s}_acc": _accuracy(logits, y, masks[f"{s}_mask"]) for s in ("train", "val", "test")}}
            history.append(row)
            if best is None or row["val_acc"] > best["val_acc"] or (row["val_acc"] == best["val_acc"] and val_loss < best["val_loss"]):
                best = {k: row[k] for k in ("train_acc", "val_acc", "test_acc", "val_loss")}
                best_epoch, bad_epochs = epoch, 0
                save_checkpoint(out / "best.pt", model, {**meta, "epoch": epoch, **best})
            else:
                bad_epochs += 1
            if progress:
                progress(epoch + 1, config.epochs, {**row, "best_val_acc": best["val_acc"]})
            if config.patience is not None and bad_epochs >= config.patience:
                stopped = "early-stopped"
                break
    except KeyboardInterrupt:
        stopped = "interrupted"
        epoch = history[-1]["epoch"] if history else start_epoch - 1
    if epoch >= start_epoch or stopped == "interrupted":
        save_last(epoch)
    _write_history(out, history)
    result = TrainResult(out, best_epoch, best or {}, len(history), stopped, history, time.perf_counter() - started)
    if stopped != "interrupted":
        (out / "summary.json").write_text(json.dumps({"best_epoch": best_epoch, **(best or {}), "epochs_run": len(history),
                                                      "stopped": stopped, "seconds_this_run": result.seconds}, indent=2) + "\n")
        _plot_history(out, history, best_epoch)
    return result


def _write_history(out: Path, history: list[dict]) -> None:
    import pandas as pd

    pd.DataFrame(history).to_csv(out / "history.csv", index=False, float_format="%.6g")


def _plot_history(out: Path, history: list[dict], best_epoch: int) -> None:
    if not history:
        return
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    epochs = [r["epoch"] for r in history]
    ax_loss.plot(epochs, [r["loss"] for r in history], label="train loss")
    ax_loss.plot(epochs, [r["val_loss"] for r in history], label="validation loss")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.legend(fontsize=8)
    for split in ("train", "val", "test"):
        ax_acc.plot(epochs, [r[f"{split}_acc"] for r in history], label=split)
    ax_acc.axvline(best_epoch, color="grey", ls="--", lw=0.8, label=f"best val (epoch {best_epoch})")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy")
    ax_acc.legend(fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.grid(True, alpha=0.3)
    fig.savefig(out / "training.png", dpi=150)
    fig.clf()


def describe(result: TrainResult) -> str:
    b = result.best
    if not b:
        return f"{result.stopped} before the first epoch finished"
    pct = lambda v: "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}%"  # noqa: E731
    return (f"{result.stopped} after {result.epochs_run} epochs; best validation at epoch {result.best_epoch}: "
            f"train {pct(b['train_acc'])}, val {pct(b['val_acc'])}, test {pct(b['test_acc'])}")
