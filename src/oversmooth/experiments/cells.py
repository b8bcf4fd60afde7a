"""A sweep cell's identity: its readable id, the key of its result, and the record of a cell
that failed (shared by the local and the Ray back-ends of :mod:`oversmooth.experiments.sweep`)."""

from __future__ import annotations

import hashlib
import json

from oversmooth.version import __version__

__all__ = ["DATA_FILES", "cell_id", "cell_key", "failed_record"]


def cell_id(cell: dict) -> str:
    """Readable and unique: ``model-conv-dN-dataset-sN-mode`` plus a short hash of the whole
    cell."""
    digest = hashlib.sha1(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:8]
    safe_ds = "".join(ch if ch.isalnum() else "_" for ch in str(cell["dataset"]))[:24]
    return (
        f"{cell['model']}-{cell['conv']}-d{cell['depth']}-{safe_ds}-s{cell['seed']}-"
        f"{cell['mode']}-{digest}"
    )


#: The option that holds the fingerprints of the datasets read from files (by their name).
DATA_FILES = "data_files"


def cell_key(cell: dict, options: dict) -> str:
    """The identity of a cell's result: a hash of its coordinates, its options (of the
    dataset files, its own dataset's fingerprint only) and the version.

    Two cells share a key only when they were computed from the same inputs by the
    same release, so a finished cell is reused exactly when its numbers would not change.
    Every file's fingerprint in every cell's key recomputed the finished cells of the other
    datasets whenever a file joined or left the grid (an audit).
    """
    files = options.get(DATA_FILES)
    if isinstance(files, dict):
        options = {k: v for k, v in options.items() if k != DATA_FILES}
        if cell.get("dataset") in files:
            options[DATA_FILES] = {cell["dataset"]: files[cell["dataset"]]}
    payload = {"cell": cell, "options": options, "version": __version__}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def failed_record(cell: dict, options: dict, error: str) -> dict:
    """The record of a cell that raised ``error`` (written like a finished one)."""
    return {
        "cell": cell,
        "id": cell_id(cell),
        "key": cell_key(cell, options),
        "options": options,
        "version": __version__,
        "status": "failed",
        "error": error,
    }
