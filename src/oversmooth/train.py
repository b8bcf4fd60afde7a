"""Training with the seed paper's recipe (Appendix B.1) and safe checkpoints.

Recipe: Adam, weight decay 5e-4, hidden width 32, full-batch node
classification on a random 60/20/20 split; Pre-LN models (``preln``,
``nonlocal-preln``, ``plain``) at a fixed learning rate 1e-3, Post-LN models
(``postln``, ``nonlocal``) with a linear warm-up to 1e-4 (over the first tenth
of the epochs unless ``warmup`` says otherwise; the paper does not give the
length).  The checkpoint with the best validation accuracy (ties: lower
validation loss) is kept, and its train/validation/test accuracies reported.

An output folder holds ``best.pt`` (best checkpoint), ``last.pt`` (the state
between two epochs, everything needed to resume exactly: weights, optimiser,
scheduler, dropout generator, best-so-far with its weights, history),
``config.json``, ``history.csv`` (one row per epoch, ``status`` ``ok`` or
``diverged``) and, once finished, ``summary.json``, ``training.png``, ``dynamics.png`` and
``report.md`` / ``report.html``.
Checkpoint files are plain dicts of tensors and numbers, written atomically and
read back with ``torch.load(weights_only=True)``.

Training runs with deterministic kernels by default, so on CPU a fixed seed
repeats bit for bit (same torch, machine and thread count), and a resumed run
equals the uninterrupted one bit for bit.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from oversmooth.checkpoint import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    _atomic_save,
    _read,
)
from oversmooth.config import MODEL_FIELDS, ModelConfig, upgrade_record, with_data_sizes
from oversmooth.nn.model import DepthModel, model_from_config
from oversmooth.outputs import (
    CSV_FLOAT,
    MARKER,
    atomic_text,
    check_ours,
    check_out_name,
    claim_folder,
    data_digests,
    move_into_place,
    write_json,
    write_marker,
)
from oversmooth.probe import Probe
from oversmooth.run_configs import TrainConfig  # re-exported
from oversmooth.runtime import environment, resolve_device, resolve_dtype

__all__ = [
    "TrainConfig",
    "TrainResult",
    "train",
    "TrainingDiverged",
    "accuracy",
]


#: writes a finished run's report: ``(out, history, best_epoch, summary, dynamics)``
ReportWriter = Callable[[Path, list, int, dict, "list | None"], Any]


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""

    clean_message = True


@dataclass
class TrainResult:
    out: Path
    best_epoch: int
    best: dict  # train_acc, val_acc, test_acc, val_loss at the best epoch
    epochs_run: int
    stopped: str  # finished | early-stopped | interrupted
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Inputs:
    """What every epoch's forwards read, on the run's device: the features (in the model's
    precision), the graph, the labels and the split masks."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    y: Tensor
    masks: dict[str, Tensor]

    def logits(self, model: torch.nn.Module) -> Tensor:
        """``model``'s forward on the whole graph."""
        return model(self.x, self.edge_index, edge_weight=self.edge_weight)

    def loss(self, logits: Tensor, split: str) -> Tensor:
        """The cross-entropy of ``logits`` on the nodes of ``split`` (``"train"``, ``"val"``)."""
        mask = self.masks[f"{split}_mask"]
        return F.cross_entropy(logits[mask], self.y[mask])


# ----------------------------------------------------------------------------- training

# What ``last.pt`` must hold to resume a run, and what each entry is.
RESUME_KEYS = {
    "model_config": "the model configuration (a dict)",
    "state_dict": "the weights after the last completed epoch",
    "optimizer": "the Adam state",
    "scheduler": "the learning-rate schedule state",
    "rng": "the dropout generator state (a uint8 tensor)",
    "epoch": "the last completed epoch (an integer)",
    "history": "one row per completed epoch (a list)",
    "best": "the best validation scores so far (a dict or None)",
    "best_epoch": "the epoch of the best checkpoint (an integer)",
    "best_state_dict": "the weights of the best checkpoint (a dict or None)",
    "bad_epochs": "epochs since the validation accuracy last rose (an integer)",
    "meta": "the dataset and training configuration of the run (a dict)",
}
# training options that --resume may change: none of them changes what an epoch computes
#: configuration keys set by something other than an option of their own name
_OPTION_OF = {"model.name": "--model", "model.in_channels": None, "model.out_channels": None}


def _as_option(key: str, value: object) -> str:
    """A configuration value as the ``oversmooth train`` option that sets it (``--model
    preln``, ``--no-self-loops``): a refusal said ``name='preln'`` (an audit); keys no option
    sets (the dataset's widths) as ``key=value``."""
    field = key.removeprefix("model.")
    option = _OPTION_OF.get(key, "--" + field.replace("_", "-"))
    if option is None:
        return f"{field}={value!r} (from the dataset)"
    if value is None:
        return f"{option} unset (its default)"
    if isinstance(value, bool):
        return option if value else "--no-" + option.removeprefix("--")
    return f"{option} {value}"


RESUME_MAY_CHANGE = ("epochs", "patience", "device", "data_root", "deterministic")
STOP_SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
HISTORY_COLUMNS = ["epoch", "loss", "val_loss", "lr", "train_acc", "val_acc", "test_acc", "status"]
#: What a run writes when it ends (not when a signal stops it): removed when a finished run is
#: resumed, so that a folder stopped again never shows the earlier end's report beside newer
#: checkpoints.
FINISHED_FILES = ("summary.json", "training.png", "dynamics.png", "report.md", "report.html")

# dynamics.csv: the probe's layer measures at every probe_interval-th epoch (0, N, 2N, ...)
DYNAMICS_METRICS = ["laplacian_energy", "dirichlet_energy", "relative_energy", "feature_norm"]
DYNAMICS_COLUMNS = ["epoch", "layer", *DYNAMICS_METRICS]


def accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> float:
    """The share of the nodes in ``mask`` whose largest logit is their label (a fraction in
    [0, 1]; NaN for an empty mask)."""
    return (
        float((logits[mask].argmax(1) == y[mask]).double().mean())
        if int(mask.sum())
        else float("nan")
    )


def _clone(obj: Any) -> Any:
    """A deep copy whose tensors are detached clones (a snapshot of a state dict)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj


@contextmanager
def _deterministic(enabled: bool, device: torch.device) -> Iterator[None]:
    """Deterministic kernels for the block (restored afterwards).

    On CPU the one order-dependent kernel the models use is the backward of
    ``x[index]`` (an accumulating ``index_put_``), which with several threads
    adds in a thread-dependent order; deterministic mode makes it serial.  On
    CUDA, kernels without a deterministic version only warn.
    """
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    if enabled:
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=device.type != "cpu")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@contextmanager
def _stop_on_signals(requested: dict) -> Iterator[None]:
    """SIGINT and SIGTERM set ``requested["signal"]``; the loop stops at the next epoch
    boundary.  A second SIGINT aborts at once (``KeyboardInterrupt``).  Only the main
    thread can receive signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            if requested.get("sigint"):
                raise KeyboardInterrupt
            requested["sigint"] = True
        requested.setdefault("signal", signum)

    # a signal the process was told to ignore stays ignored (a sweep's worker: Ctrl-C is its
    # parent's to handle; otherwise a trained cell would stop early and be recorded as done)
    previous = {
        sig: signal.signal(sig, handler)
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _clean_stale_temporaries(folder: Path) -> None:
    """Remove ``.NAME.tmp-PID`` files that processes no longer alive left in ``folder``."""
    from oversmooth.outputs import HIDDEN_COPY, _pid_alive

    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = HIDDEN_COPY.match(entry.name)
        if (
            match
            and match.group(2) == "tmp"
            and entry.is_file()
            and not _pid_alive(int(match.group(3)))
        ):
            entry.unlink(missing_ok=True)


def _check_out(out: Path, resume: bool, overwrite: bool) -> None:
    check_out_name(out)
    if resume:
        if not (out / "last.pt").is_file():
            raise FileNotFoundError(
                f"--resume: {out / 'last.pt'} not found; start a new run without --resume"
            )
        check_ours(out, kind="train", action="resume in")
    elif out.exists() and not out.is_dir():
        raise FileExistsError(f"--out: {out} exists and is not a folder; choose another path")
    elif out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"--out: {out} already exists; pass --resume to continue it or --overwrite "
            "to start over"
        )
    elif overwrite:
        check_ours(out, writer="train")


def _flat(record: dict) -> dict:
    """A training config record as ``{field: value}``, its model's fields as ``model.NAME``.

    A record from before the model fields were nested is upgraded first; a model field it
    lacks had its default then (training had no option for it), so it reads as that.
    """
    record = upgrade_record(record)
    model = record.pop("model", None)
    model = model if isinstance(model, dict) else {}
    defaults = ModelConfig().to_dict()
    record.update({f"model.{k}": model.get(k, defaults[k]) for k in MODEL_FIELDS})
    return record


class _Run:
    """The state of one training run between two epochs, and how it is saved."""

    def __init__(
        self,
        config: TrainConfig,
        out: Path,
        model: DepthModel,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        meta: dict,
        device: torch.device,
        overwrite: bool,
    ) -> None:
        self.config, self.out, self.model = config, out, model
        self.optimizer, self.scheduler, self.meta = optimizer, scheduler, meta
        self.device, self.overwrite = device, overwrite
        self.rng = torch.Generator().manual_seed(config.model.seed)  # the dropout stream
        self.epoch = -1  # last completed epoch
        self.history: list[dict] = []
        self.dynamics: list[dict] = []  # DYNAMICS_COLUMNS rows, epochs in increasing order
        self.probe: Probe | None = None  # attached only during the recorded eval forwards
        self.best: dict | None = None
        self.best_epoch, self.bad_epochs = -1, 0
        self.best_state: dict | None = None
        self.folder_ready = False
        self.best_saved = -1  # the epoch best.pt holds, as written by this process
        self.resumed = False
        self.pending: list[dict] = []  # probe rows of the epoch being scored
        self.interval = config.probe_interval  # a resumed run keeps the interval it started with

    # -- state ------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything needed to continue after the last completed epoch (cloned)."""
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model_config": self.model.config.to_dict(),
            "state_dict": _clone(self.model.state_dict()),
            "optimizer": _clone(self.optimizer.state_dict()),
            "scheduler": _clone(self.scheduler.state_dict()),
            "rng": self.rng.get_state(),
            "epoch": self.epoch,
            "history": len(self.history),  # rows kept at save time
            "dynamics": len(self.dynamics),
            "probe_interval": self.interval,
            "best": dict(self.best) if self.best else None,
            "best_epoch": self.best_epoch,
            "best_state_dict": self.best_state,
            "bad_epochs": self.bad_epochs,
            "meta": self.meta,
        }

    def restore(self, path: Path) -> None:
        state = _read(path, self.device, RESUME_KEYS)
        saved = state["meta"].get("train_config") if isinstance(state["meta"], dict) else None
        if not isinstance(saved, dict):
            raise CheckpointError(
                f"{path}: checkpoint has no 'meta.train_config' entry (expected the training "
                "options of the run); it cannot be resumed: start a new run"
            )
        current, before = _flat(self.config.to_dict()), _flat(saved)
        for key, value in current.items():
            # the warm-up is compared by its length in epochs below: a run that took the
            # default (a tenth of --epochs) is resumed with more epochs by the --warmup N its
            # refusal names (that --warmup was refused as "trained with warmup=None")
            if key == "warmup":
                continue
            if key not in RESUME_MAY_CHANGE and before.get(key) != value:
                raise CheckpointError(
                    f"--resume: {path} was trained with {_as_option(key, before.get(key))}, "
                    f"not {_as_option(key, value)}; pass the same options or start a new --out"
                )
        try:
            # a missing or ill-typed saved value is refused by TrainConfig and caught below
            saved_warmup = replace(
                self.config,
                epochs=saved.get("epochs"),  # type: ignore[arg-type]
                warmup=saved.get("warmup"),
            ).warmup_epochs
        except (TypeError, ValueError):
            saved_warmup = None
        if saved_warmup != self.config.warmup_epochs:
            given = (
                f"--warmup {self.config.warmup} gives"
                if self.config.warmup is not None
                else f"--epochs {self.config.epochs} implies"
            )
            raise CheckpointError(
                f"--resume: {path} was trained with a {saved_warmup}-epoch warm-up but {given} "
                f"{self.config.warmup_epochs}; pass --warmup {saved_warmup}"
            )
        try:
            self.model.load_state_dict(state["state_dict"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.rng.set_state(state["rng"].cpu())
            self.epoch, self.bad_epochs = int(state["epoch"]), int(state["bad_epochs"])
            self.best_epoch = int(state["best_epoch"])
            self.history = [dict(row) for row in state["history"]]
            # optional: a checkpoint written without the probe has none
            self.dynamics = [
                dict(row) for row in state.get("dynamics", []) if row["epoch"] <= self.epoch
            ]
            if self.config.probe_every is None and "probe_interval" in state:
                self.interval = int(state["probe_interval"])  # the default, fixed at the start
        except (RuntimeError, ValueError, TypeError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(
                f"{path}: its training state does not fit this run ({first[:160]}); "
                "start a new --out"
            ) from None
        if len(self.history) != self.epoch + 1:
            raise CheckpointError(
                f"{path}: history has {len(self.history)} rows but the checkpoint is at epoch "
                f"{self.epoch} (expected {self.epoch + 1}); the file is inconsistent: "
                "start a new --out"
            )
        if self.config.epochs < len(self.history):  # config.json would record fewer than ran
            raise CheckpointError(
                f"--resume: {path} has trained {len(self.history)} epochs already, more than "
                f"--epochs {self.config.epochs}; pass --epochs {len(self.history)} or more"
            )
        self.best = dict(state["best"]) if state["best"] else None
        self.best_state = state["best_state_dict"]
        self.resumed = True

    # -- files ------------------------------------------------------------------------------
    def _write(self, write: Callable[[Path], None]) -> None:
        """Run ``write(folder)``.  The first write of a new run goes into a hidden sibling
        ``.NAME.tmp-PID`` that is renamed into place once complete (replacing the folder of
        ``--overwrite``), so ``out`` never exists without its files."""
        out = self.out
        if self.folder_ready:
            write(out)
            return
        if self.resumed:  # a finished run continued: what its end wrote is stale until it ends
            for name in FINISHED_FILES:
                (out / name).unlink(missing_ok=True)
            if not (out / MARKER).is_file():  # begun by a version before the marker
                write_marker(out, "train")
            self._write_config(out)
            write(out)
            self.folder_ready = True
            return
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            write_marker(tmp, "train")
            self._write_config(tmp)
            write(tmp)
            move_into_place(tmp, out)  # replaces out: --overwrite, or an empty folder as --out
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.folder_ready = True

    def _write_config(self, folder: Path) -> None:
        config = self.config
        sizes = [(self.meta["num_features"], self.meta["num_classes"])]
        record = {
            "command": "train",
            **with_data_sizes(config.to_dict(), sizes),
            # what the settings left to their default (None above) resolved to
            "learning_rate": config.learning_rate,
            "warmup_epochs": config.warmup_epochs,
            "probe_interval": self.interval,
            "ffn_channels": config.model.ffn_channels,
            "device_resolved": str(self.device),
            "environment": environment(self.device),
        }
        if config.probe_every is None and self.interval != config.probe_interval:
            # a resumed run keeps the default interval it started with, which the new --epochs
            # would not give: named, so that the settings and the Reproduce line say it
            record["probe_every"] = self.interval
        write_json(folder / "config.json", record)

    def save(self, snap: dict) -> None:
        """Write best.pt, last.pt and history.csv for the snapshot ``snap``, in that order
        (after a SIGKILL best.pt may be ahead of last.pt, never behind; --resume rewrites it)."""
        if snap["epoch"] < 0:
            return
        rows = self.history[: snap["history"]]
        dynamics = self.dynamics[: snap["dynamics"]]

        def write(folder: Path) -> None:
            if snap["best_state_dict"] is not None and self.best_saved != snap["best_epoch"]:
                self._best(snap, folder)
            _atomic_save({**snap, "history": rows, "dynamics": dynamics}, folder / "last.pt")
            self._history(rows, folder)
            if self.interval:
                self._dynamics(dynamics, folder)

        self._write(write)

    def write_best(self, snap: dict) -> None:
        self._write(lambda folder: self._best(snap, folder))

    def write_history(self, rows: list[dict]) -> None:
        self._write(lambda folder: self._history(rows, folder))

    def _best(self, snap: dict, folder: Path) -> None:
        _atomic_save(
            {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "model_config": snap["model_config"],
                "state_dict": snap["best_state_dict"],
                "meta": {**self.meta, "epoch": snap["best_epoch"], **snap["best"]},
            },
            folder / "best.pt",
        )
        self.best_saved = snap["best_epoch"]

    @staticmethod
    def _history(rows: list[dict], folder: Path) -> None:
        import pandas as pd

        frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
        atomic_text(folder / "history.csv", frame.to_csv(index=False, float_format=CSV_FLOAT))

    @staticmethod
    def _dynamics(rows: list[dict], folder: Path) -> None:
        import pandas as pd

        frame = pd.DataFrame(rows, columns=DYNAMICS_COLUMNS)
        atomic_text(folder / "dynamics.csv", frame.to_csv(index=False, float_format=CSV_FLOAT))

    # -- one epoch --------------------------------------------------------------------------
    def step(self, epoch: int, inputs: _Inputs, fork: list) -> tuple[dict, str | None]:
        """Train one epoch; returns its history row and, when it diverged, what went wrong."""
        row, problem = self._train_pass(epoch, inputs, fork)
        if problem is None:
            problem = self._score(epoch, row, inputs, fork)
        if problem is not None:
            return {**row, "status": "diverged"}, problem
        return row, None

    def _train_pass(self, epoch: int, inputs: _Inputs, fork: list) -> tuple[dict, str | None]:
        """The training forward (dropout drawn from the run's own stream), backward and
        optimiser step: the epoch's row with its loss and learning rate, and what diverged."""
        model, optimizer = self.model, self.optimizer
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with torch.random.fork_rng(devices=fork):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self.rng)))  # dropout
            logits = inputs.logits(model)
        loss = inputs.loss(logits, "train")
        row = {
            "epoch": epoch,
            "loss": float(loss.detach()),
            "val_loss": math.nan,
            "lr": optimizer.param_groups[0]["lr"],
            "train_acc": math.nan,
            "val_acc": math.nan,
            "test_acc": math.nan,
            "status": "ok",
        }
        if not math.isfinite(row["loss"]):
            return row, f"the training loss became {row['loss']}"
        loss.backward()
        optimizer.step()  # at row["lr"], the rate this epoch used (read before the step)
        self.scheduler.step()  # the next epoch's rate: not this row's
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            return row, f"the weights became non-finite ({bad[0]})"
        return row, None

    def _score(self, epoch: int, row: dict, inputs: _Inputs, fork: list) -> str | None:
        """The eval-mode forward: the validation loss and the accuracies into ``row`` and, on a
        probed epoch, the probe's layer rows (pending); returns what diverged, if anything."""
        self.model.eval()
        every = self.interval
        probe = self.probe if every and epoch % every == 0 else None
        # the eval-mode, no-grad forward that scores the epoch is also the probe's pass (no
        # dropout, nothing random: the training stream is untouched; the fork makes sure)
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=fork),
            probe if probe is not None else nullcontext(),
        ):
            logits = inputs.logits(self.model)
            row["val_loss"] = float(inputs.loss(logits, "val"))
        if not math.isfinite(row["val_loss"]):
            # no accuracies for it: the arg-max of NaN logits is a class all the same, and the
            # diverged row read 12.7 / 12.5 / 14.0% (an audit)
            if probe is not None:
                probe.reset()
            return f"the validation loss became {row['val_loss']}"
        for split in ("train", "val", "test"):
            row[f"{split}_acc"] = accuracy(logits, inputs.y, inputs.masks[f"{split}_mask"])
        if probe is not None:
            frame = probe.to_frame()
            probe.reset()  # only this epoch's scalars are kept: memory stays flat
            self.pending = [
                {"epoch": epoch, "layer": int(r["layer"]), **{m: r[m] for m in DYNAMICS_METRICS}}
                for r in frame.to_dict("records")
            ]
        return None

    def record(self, row: dict) -> None:
        """Append a finished epoch (and its probe rows) and update the best-so-far."""
        self.history.append(row)
        self.dynamics.extend(self.pending)
        self.pending = []
        self.epoch = row["epoch"]
        best = self.best
        # patience counts epochs without a higher validation accuracy: a tie with a lower
        # validation loss replaces the checkpoint but is no improvement (in float32 the loss
        # drifts in its 7th digit, and a run whose accuracy never rose ran on past --patience)
        rose = best is None or row["val_acc"] > best["val_acc"]
        lower_loss_tie = (
            best is not None
            and row["val_acc"] == best["val_acc"]
            and row["val_loss"] < best["val_loss"]
        )
        if rose or lower_loss_tie:
            self.best = {k: row[k] for k in ("train_acc", "val_acc", "test_acc", "val_loss")}
            self.best_epoch = row["epoch"]
            self.best_state = _clone(self.model.state_dict())
        self.bad_epochs = 0 if rose else self.bad_epochs + 1


def _check_run_options(resume: bool, overwrite: bool, checkpoint_every: float) -> None:
    if resume and overwrite:
        raise ValueError(
            "--resume and --overwrite: pass one (--resume continues the run, "
            "--overwrite starts it over)"
        )
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, (int, float))
        or not (0 <= checkpoint_every < math.inf)
    ):
        raise ValueError(
            f"checkpoint_every: expected seconds >= 0 (0: after every epoch), "
            f"received {checkpoint_every!r}"
        )


def _training_data(config: TrainConfig, device: torch.device) -> tuple[Any, _Inputs]:
    """The dataset (checked for labels, a usable split and no batch the model would mix), its
    features in the model's precision, its edges and edge weights, labels and split masks, all
    on ``device``."""
    from oversmooth.data import load, split_masks

    data = load(config.dataset, data_root=config.data_root)
    if getattr(data, "y", None) is None:
        raise ValueError(f"dataset: {config.dataset!r} has no labels to train on")
    from oversmooth.analysis import check_feature_range

    # features the model's precision cannot hold: the loss was NaN at epoch 0, with a hint to
    # lower --lr (a review)
    check_feature_range(f"dataset {config.dataset}", data.x, config.model.dtype)
    masks = split_masks(data, config.split, seed=config.model.seed)
    if not int(masks["train_mask"].sum()) or not int(masks["val_mask"].sum()):
        raise ValueError(
            f"split: {config.split!r} leaves no training or validation node on "
            f"{config.dataset!r}; "
            + (
                "use --split random"
                if config.split != "random"
                else f"the random 60/20/20 split needs at least 3 nodes, it has {data.num_nodes}"
            )
        )
    if getattr(data, "batch", None) is not None and (
        config.model.norm == "graph" or "S" in config.model.pattern
    ):
        raise ValueError(
            f"dataset: {config.dataset!r} is a batch of graphs, and training does not pass the "
            "batch to the model yet, so graph-mode LayerNorm and S blocks would mix the graphs; "
            "train with --norm node and an M-only --pattern, or on one graph"
        )
    x = data.x.to(device, resolve_dtype(config.model.dtype))  # the model's precision
    edge_index, y = data.edge_index.to(device), data.y.to(device)
    edge_weight = getattr(data, "edge_weight", None)  # used by every forward when present
    edge_weight = None if edge_weight is None else edge_weight.to(device)
    masks = {k: v.to(device) for k, v in masks.items()}
    return data, _Inputs(x, edge_index, edge_weight, y, masks)


def _optimizer(model: torch.nn.Module, config: TrainConfig) -> tuple[torch.optim.Optimizer, Any]:
    """Adam with the run's weight decay and a linear warm-up over ``config.warmup_epochs``."""
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    warm = config.warmup_epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda e: min(1.0, (e + 1) / warm) if warm > 0 else 1.0
    )
    return optimizer, scheduler


def train(
    config: TrainConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    checkpoint_every: float = 60.0,
    report: ReportWriter | None = None,
) -> TrainResult:
    """Train ``config`` into the folder ``out`` (see the module docstring).

    Everything the run needs (options, device, data, model and, with ``resume``,
    ``out/last.pt``) is checked before the first epoch; the folder is claimed
    for the run (a second run on it fails at once) and created only when there
    is something to write.

    Args:
        resume: continue from ``out/last.pt`` up to ``config.epochs``; on the
            same device, torch version and thread count, the resumed run's
            history and weights equal those of an uninterrupted run bit for bit.
        overwrite: start over in an existing ``out`` (replaced at the first write).
        progress: called after every epoch with ``(epochs done, epochs in all, what)``,
            ``what`` the epoch's loss and accuracies in one line.
        checkpoint_every: seconds between two saves of ``last.pt`` (0: after
            every epoch); a run also saves when it stops.  A SIGKILL loses at
            most the epochs since the last save.
        report: called once a run has finished, before ``summary.json`` marks it
            finished, with ``(out, history, best_epoch, summary, dynamics)``; the
            commands pass :func:`oversmooth.report.writers.write_training_report`
            (training computes, the write layer writes).

    SIGINT (Ctrl-C) and SIGTERM stop the run at the end of the current epoch,
    save it and return with ``stopped="interrupted"`` / ``"terminated"``; a
    second Ctrl-C aborts at once (``last.pt`` then holds the last save).  A
    non-finite training loss, validation loss or weight raises
    :class:`TrainingDiverged`; ``last.pt`` then holds the last finite state and
    ``history.csv`` ends with the diverged epoch (``status`` = ``diverged``).
    """
    out = check_out_name(out)  # before Path(): Path("") is "."
    _check_run_options(resume, overwrite, checkpoint_every)
    _check_out(out, resume, overwrite)
    if config.warmup_epochs > config.epochs:
        import warnings

        warnings.warn(
            f"--warmup {config.warmup_epochs} is longer than --epochs {config.epochs}: the "
            f"learning rate rises to only {config.epochs / config.warmup_epochs:.0%} of its peak "
            f"{config.learning_rate:g} in this run",
            stacklevel=2,
        )
    device = resolve_device(config.device)
    data, inputs = _training_data(config, device)
    run = _new_run(config, out, data, device, overwrite)
    empty = out.is_dir() and not any(out.iterdir())
    reads = (config.dataset, config.data_root)  # replacing a folder that holds them is refused
    with claim_folder(out, overwrite=resume or overwrite or empty, reads=reads, writer="train"):
        _check_out(out, resume, overwrite)  # again, now that the folder is ours
        _clean_stale_temporaries(out)
        if resume:
            run.restore(out / "last.pt")
        try:
            return _train_run(run, inputs, progress, checkpoint_every, report)
        except KeyboardInterrupt:  # a second Ctrl-C: last.pt keeps the last save
            _clean_stale_temporaries(out)
            raise


def _new_run(
    config: TrainConfig, out: Path, data: Any, device: torch.device, overwrite: bool
) -> _Run:
    """A new run on ``data``: the model initialised from ``config``, Adam and its warm-up, and
    what the checkpoints record of the dataset and the options (``meta``)."""
    num_classes = int(data.y.max()) + 1
    model = model_from_config(config.model_for(data.num_features, num_classes), device)
    optimizer, scheduler = _optimizer(model, config)
    meta = {
        "dataset": config.dataset,
        "split": config.split,
        "split_seed": config.model.seed,
        "num_features": data.num_features,
        "num_classes": num_classes,
        "train_config": config.to_dict(),
    }
    return _Run(config, out, model, optimizer, scheduler, meta, device, overwrite)


def _train_run(
    run: _Run,
    inputs: _Inputs,
    progress: Callable[[int, int, str], None] | None,
    checkpoint_every: float,
    report: ReportWriter | None,
) -> TrainResult:
    """Run the epochs with deterministic kernels (when asked) and SIGINT/SIGTERM caught at
    epoch boundaries; a signal that came after the last epoch is still obeyed."""
    if run.interval:  # energies on the input graph (no self loops), as analyze
        run.probe = Probe(
            run.model, inputs.edge_index, DYNAMICS_METRICS, edge_weight=inputs.edge_weight
        )
    requested: dict = {}
    with _deterministic(run.config.deterministic, run.device), _stop_on_signals(requested):
        result = _loop(run, inputs, requested, progress, checkpoint_every, report)
    if requested.get("signal") and result.stopped not in STOP_SIGNALS.values():
        # it came after the last epoch (while the report was written): still obeyed
        if requested["signal"] == signal.SIGINT:
            raise KeyboardInterrupt
        result = replace(result, stopped=STOP_SIGNALS[requested["signal"]])
    return result


def _loop(
    run: _Run,
    inputs: _Inputs,
    requested: dict,
    progress: Callable[[int, int, str], None] | None,
    checkpoint_every: float,
    report: ReportWriter | None,
) -> TrainResult:
    """The epochs after the last completed one up to ``config.epochs`` (or an early stop, or a
    signal in ``requested``), saving ``last.pt`` every ``checkpoint_every`` seconds and when
    they end; then the finished run's report and summary."""
    config, out = run.config, run.out
    fork = [run.device] if run.device.type == "cuda" else []
    started = last_save = time.perf_counter()
    good = run.snapshot()  # the last finite state, at an epoch boundary
    saved_epoch = run.epoch if run.resumed else -1
    if run.resumed and good["best_state_dict"] is not None:
        run.write_best(good)  # best.pt may be ahead of last.pt after a SIGKILL
    stopped = "finished"
    for epoch in range(run.epoch + 1, config.epochs):
        if config.patience is not None and run.bad_epochs >= config.patience:
            stopped = "early-stopped"
            break
        row, problem = run.step(epoch, inputs, fork)
        if problem is not None:
            _diverged(run, good, saved_epoch, row, f"{problem} at epoch {epoch}")
        run.record(row)
        good = run.snapshot()
        if progress:
            progress(epoch + 1, config.epochs, _progress_line(row, run.best))
        if "signal" in requested:
            stopped = STOP_SIGNALS[requested["signal"]]
            break
        if time.perf_counter() - last_save >= checkpoint_every and epoch + 1 < config.epochs:
            run.save(good)
            saved_epoch, last_save = good["epoch"], time.perf_counter()
    if good["epoch"] > saved_epoch or (good["epoch"] >= 0 and not (out / "history.csv").is_file()):
        run.save(good)
    return _finish(run, stopped, time.perf_counter() - started, report)


def _progress_line(row: dict, best: dict | None) -> str:
    """What the progress callback says of a finished epoch."""
    assert best is not None  # set by run.record
    return (
        f"loss {row['loss']:.3f} train {100 * row['train_acc']:.1f}% "
        f"val {100 * row['val_acc']:.1f}% best val {100 * best['val_acc']:.1f}%"
    )


def _diverged(run: _Run, good: dict, saved_epoch: int, row: dict, problem: str) -> NoReturn:
    """Keep the last finite state ``good`` (saved unless it already is) and the history up to
    the diverged ``row``, then raise :class:`TrainingDiverged` saying what is kept."""
    if good["epoch"] > saved_epoch:
        run.save(good)
    run.write_history(run.history[: good["history"]] + [row])
    kept = (
        f"last.pt keeps epoch {good['epoch']}, the last finite state"
        if good["epoch"] >= 0
        else "no checkpoint was saved"
    )
    best = (
        f"best checkpoint (epoch {good['best_epoch']}) kept in {run.out / 'best.pt'}"
        if good["best_state_dict"] is not None
        else "no best checkpoint yet"
    )
    raise TrainingDiverged(
        f"training stopped: {problem}; {kept}; {best}; history.csv ends with the diverged "
        "epoch; try a lower --lr or a longer --warmup"
    )


def _finish(run: _Run, stopped: str, seconds: float, report: ReportWriter | None) -> TrainResult:
    """The run's result; a run that ended (not stopped by a signal) also gets its report and
    then ``summary.json``, which marks it finished."""
    out = run.out
    result = TrainResult(
        out, run.best_epoch, run.best or {}, len(run.history), stopped, run.history, seconds
    )
    if stopped not in STOP_SIGNALS.values() and run.history:
        summary = {
            "best_epoch": run.best_epoch,
            **(run.best or {}),
            "epochs_run": len(run.history),
            "stopped": stopped,
            "seconds_this_run": seconds,
            # the seconds are this process's: a resumed run's do not count what ran before
            "resumed": run.resumed,
        }
        # the report first, summary.json (which says "finished") last: a run that fails in
        # between (a full disk) is not marked finished
        if report is not None:
            report(out, run.history, run.best_epoch, summary, run.dynamics or None)
        write_json(out / "summary.json", summary)
        _record_digests(out)
    return result


#: A finished run's data files, whose SHA-256 its config.json records (``digests``), for
#: ``oversmooth report`` to refuse one changed since (an accuracy edited into summary.json and
#: history.csv was shown as the run's; an audit).
DIGESTED = ("history.csv", "dynamics.csv", "summary.json")


def _record_digests(out: Path) -> None:
    """Add the digests of :data:`DIGESTED` to ``out``'s config.json (after summary.json: a run
    that stops in between is finished, and unchecked as an older version's)."""
    path = out / "config.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record, dict):
        write_json(path, {**record, "digests": data_digests(out, DIGESTED)})


def epochs_text(count: int) -> str:
    """``1 epoch``, ``15 epochs`` (as ``report.document.counted`` says any count: the
    write layer's, which this layer does not import)."""
    return f"{count} epoch{'' if count == 1 else 's'}"


def describe(result: TrainResult) -> str:
    b = result.best
    if not b:
        return f"{result.stopped} before the first epoch finished"
    pct = lambda v: (  # noqa: E731
        "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}%"
    )
    return (
        f"{result.stopped} after {epochs_text(result.epochs_run)}; "
        f"best validation at epoch {result.best_epoch}: "
        f"train {pct(b['train_acc'])}, val {pct(b['val_acc'])}, test {pct(b['test_acc'])}"
    )
