"""The checkpoint format and its safe I/O.

A checkpoint is a plain dict of tensors and numbers (``format``, ``version``,
``model_config``, ``state_dict``, ``meta``), written atomically and read back with
``torch.load(weights_only=True)``; :func:`load_checkpoint` rebuilds its model.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from oversmooth.config import MAX_SEED, drawn_seed, upgrade_record
from oversmooth.nn.model import DepthModel, ModelConfig, model_from_config
from oversmooth.outputs import atomic_file, check_path_text, shown_path

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "oversmooth-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not match what it is used for."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written; its message is the one line the CLI prints."""

    clean_message = True

    def __str__(self) -> str:
        return str(self.strerror)  # the line itself, without OSError's "[Errno N]"


#: Free space under which a failed checkpoint write is put down to a full disk.
FULL_BYTES = 1 << 20


def _atomic_save(obj: object, path: Path) -> None:
    def write(tmp: Path) -> None:
        try:
            torch.save(obj, tmp)
        except (RuntimeError, OSError) as exc:  # torch's zip writer fails as a RuntimeError
            raise _write_error(path, exc) from None

    atomic_file(path, write)


def _write_error(path: Path, exc: BaseException) -> CheckpointWriteError:
    """What went wrong writing the checkpoint ``path``, in one line: a full disk said as
    such (torch's writer reported it as ``[enforce fail at inline_container.cc:672] .
    unexpected pos 357504 vs 357396``), anything else with its own first line.  The previous
    checkpoint at ``path`` is untouched (written atomically)."""
    import errno
    import shutil

    try:
        free: int | None = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    full = getattr(exc, "errno", None) == errno.ENOSPC or (free is not None and free < FULL_BYTES)
    # a run's first save writes into its hidden new folder (.NAME.tmp-PID), which goes with
    # it: no previous checkpoint, nothing to resume (the line said "the previous checkpoint is
    # kept ... rerun with --resume", of a temporary path, and --resume then found none)
    new_run = shown_path(path.parent)
    if full and new_run != path.parent:
        return CheckpointWriteError(
            errno.ENOSPC,
            f"{new_run}: its first checkpoint could not be written, no space left on the device; "
            "nothing was saved: free some space and rerun",
        )
    if full:
        return CheckpointWriteError(
            errno.ENOSPC,
            f"{path}: could not be written, no space left on the device; the previous "
            "checkpoint is kept: free some space and rerun with --resume",
        )
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return CheckpointWriteError(
        getattr(exc, "errno", None) or errno.EIO,
        f"{path}: could not be written ({first}); the previous checkpoint is kept",
    )


def save_checkpoint(path: str | os.PathLike, model: DepthModel, meta: dict) -> None:
    """Weights plus the model config and ``meta`` (dataset, split, accuracies...), atomically."""
    _atomic_save(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model_config": model.config.to_dict(),
            "state_dict": model.state_dict(),
            "meta": meta,
        },
        Path(path),
    )


CHECKPOINT_KEYS = {
    "model_config": "the model configuration (a dict)",
    "state_dict": "the model weights (a dict of tensors)",
}


def _read(
    path: Path, map_location: str | torch.device | None, required: dict[str, str] = CHECKPOINT_KEYS
) -> dict:
    check_path_text(path, "checkpoint")
    if path.is_dir():
        inside = ", ".join(p.name for p in sorted(path.glob("*.pt"))[:3])
        hint = f"the checkpoints in it: {inside}" if inside else "it holds no .pt file"
        raise IsADirectoryError(
            f"{path}: a folder, expected a checkpoint file ({hint}; a training run's best is "
            "RUN/best.pt)"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure here means an unreadable file
        # (torch's exception type named first, "(KeyError: the file is corrupted ...)", read
        # like a crash of this program: an audit)
        raise CheckpointError(
            f"{path}: not a readable oversmooth checkpoint: the file is corrupted, truncated, "
            f"or not a weights-only torch file (torch.load: {type(exc).__name__}); retrain or "
            "restore it"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not an oversmooth checkpoint (no '{FORMAT}' marker); "
            "train one with `oversmooth train`"
        )
    if obj.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {obj.get('version')} is not "
            f"supported (expected {FORMAT_VERSION})"
        )
    for key, what in required.items():
        if key not in obj:
            raise CheckpointError(
                f"{path}: checkpoint has no {key!r} entry (expected {what}); it was not written by "
                "this version of `oversmooth train` or was altered: retrain it"
            )
    for key in ("model_config", "meta"):
        if key in obj and not isinstance(obj[key], dict):
            raise CheckpointError(
                f"{path}: checkpoint entry {key!r} is a {type(obj[key]).__name__}, "
                "expected a dict; retrain it"
            )
    return obj


def _key_mismatch(missing: list[str], unexpected: list[str]) -> str:
    """The weights a checkpoint lacks or has too many of, counted, with the first of each
    (torch's list of every key, cut at 200 characters, ended in '", )': an audit); empty when
    none."""
    parts = [
        f"{len(keys)} {what} weight{'s' if len(keys) != 1 else ''}, the first {keys[0]}"
        for keys, what in ((missing, "missing"), (unexpected, "unexpected"))
        if keys
    ]
    return "; ".join(parts)


def _check_training_record(path: Path, config: dict, meta: dict) -> None:
    """The model config against the training's own record of it (``meta["train_config"]``,
    where a training wrote one): Pre-LN, Post-LN and plain models have the same weights, so a
    checkpoint whose label was changed by hand loaded as the other architecture and was
    measured as it, with no word (an audit)."""
    record = meta.get("train_config")
    if not isinstance(record, dict):
        return
    trained = upgrade_record(record).get("model")  # the flat record of older runs too
    if not isinstance(trained, dict):
        return
    for field in ("name", "conv", "depth", "hidden", "heads", "norm"):
        said = trained.get(field)  # None: the option left at its default, nothing recorded
        if said is not None and field in config and said != config[field]:
            raise CheckpointError(
                f"{path}: its model config says {field}={config[field]!r} but its training "
                f"record says {field}={said!r}: the file was changed after training; "
                "retrain it, or restore its model config"
            )


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device | None = None,
    expect: dict | None = None,
) -> tuple[DepthModel, dict]:
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
    meta = obj.get("meta") or {}
    config_dict = dict(obj["model_config"])
    for key, wanted in (expect or {}).items():
        field = "name" if key == "model" else key
        have = meta.get("dataset") if key == "dataset" else config_dict.get(field)
        if wanted is not None and have != wanted:
            raise CheckpointError(
                f"{path}: checkpoint has {key}={have!r} but {key}={wanted!r} "
                "was asked for; drop the option or use a matching checkpoint"
            )
    _check_training_record(path, config_dict, meta)
    seed = config_dict.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed > MAX_SEED:
        # written before seeds were held to 32 bits: torch drew the weights from the low 32
        # bits, so that seed is the same draw (such a file failed as "model config invalid")
        config_dict["seed"] = drawn_seed(seed)
    try:
        config = ModelConfig(**config_dict)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its model config is invalid ({exc})") from None
    model = model_from_config(config, map_location)
    try:
        loaded = model.load_state_dict(obj["state_dict"], strict=False)
        detail = _key_mismatch(loaded.missing_keys, loaded.unexpected_keys)
    except RuntimeError as exc:
        # torch's first line is only "Error(s) in loading state_dict for DepthModel:"; the
        # entry that does not fit is on the next (a size mismatch)
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 and lines[0].startswith("Error(s)") else lines[0]
        detail = detail[:200]
    if detail:
        raise CheckpointError(
            f"{path}: weights do not match the architecture in the checkpoint ({detail}); "
            "the file was changed after training, or written for another model: retrain it"
        ) from None
    model.eval()
    return model, meta
