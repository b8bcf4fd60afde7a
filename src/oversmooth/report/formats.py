"""The file formats of the figures and tables a report folder holds: the one place where
figures are saved and tables written.

Figures are always saved as PNG (150 dpi: ``report.md`` and ``report.html`` show the PNG);
``svg`` and ``pdf`` add vector copies beside it, same name, other suffix.  Tables are always
written as CSV (the reports, ``oversmooth report DIR`` and every reader of a folder read the
CSV); ``parquet`` adds ``NAME.parquet`` beside each ``NAME.csv``, with the full float64
precision (the CSV keeps 10 significant digits where its writer says so) and the same columns
(an index written to the CSV is a column of the Parquet file).  Parquet needs pyarrow
(``pip install pyarrow``, or the ``parquet`` extra); asking for it without pyarrow is refused
by :func:`table_formats` before any work.

Every file is written atomically (:func:`oversmooth.outputs.atomic_file`).  Nothing here
imports matplotlib, pandas or pyarrow at import time: the CLI validates its options with
:func:`figure_formats` and :func:`table_formats` before loading anything heavy.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oversmooth.outputs import CSV_FLOAT, atomic_file

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "CSV_FLOAT",
    "FIGURE_FORMATS",
    "TABLE_FORMATS",
    "DEFAULT_FIGURE_FORMATS",
    "DEFAULT_TABLE_FORMATS",
    "figure_formats",
    "table_formats",
    "parquet_available",
    "save_figure",
    "write_table",
    "write_beside",
]

DPI = 150  # of every saved PNG
#: zlib level of every saved PNG.  Level 1 encoded the default analysis report's five figures
#: in 73 ms against 129 ms at Pillow's default 6, into files 13% larger (779 KB against 687 KB
#: in all); the pixels are the same.
PNG_COMPRESSION = 1
FIGURE_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("csv", "parquet")
DEFAULT_FIGURE_FORMATS = ("png",)
DEFAULT_TABLE_FORMATS = ("csv",)
PARQUET_HINT = "pip install pyarrow"
# no creation dates in the vector files: regenerating a figure changes it only when it changed
_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


def _parse(value: str | Iterable[str] | None, option: str, valid: tuple[str, ...]) -> list[str]:
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = [str(p).strip().lower().lstrip(".") for p in parts]
    names = [n for n in names if n]
    if not names:
        raise ValueError(
            f"{option}: expected comma-separated formats from {', '.join(valid)}, "
            f"received {value!r}"
        )
    for name in names:
        if name not in valid:
            raise ValueError(
                f"{option}: unknown format {name!r}; expected any of {', '.join(valid)}, "
                f"e.g. {option} {','.join(valid)}"
            )
    # as every other list option (--seeds, --depths, --metrics) refuses a repeat (an audit)
    twice = next((n for k, n in enumerate(names) if n in names[:k]), None)
    if twice is not None:
        raise ValueError(f"{option}: {twice} appears twice; give each format once")
    return names


def figure_formats(
    value: str | Iterable[str] | None, option: str = "--figure-format"
) -> tuple[str, ...]:
    """``"svg,pdf"`` (or a list) -> ``("png", "svg", "pdf")``: the formats every figure is
    saved in, PNG always first (the reports show it), in the order of :data:`FIGURE_FORMATS`.
    ``None``: PNG alone.  An unknown name is refused, listing the valid ones."""
    chosen = set(_parse(value, option, FIGURE_FORMATS)) | {"png"}
    return tuple(f for f in FIGURE_FORMATS if f in chosen)


def parquet_available() -> bool:
    """Whether pandas can write Parquet here: pyarrow imports (asked only when Parquet is)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def table_formats(
    value: str | Iterable[str] | None, option: str = "--table-format"
) -> tuple[str, ...]:
    """``"parquet"`` (or a list) -> ``("csv", "parquet")``: the formats every table is written
    in, CSV always first.  ``None``: CSV alone.  Parquet without pyarrow is refused here, in
    one line that says how to install it, so that a run never fails at its last step."""
    chosen = set(_parse(value, option, TABLE_FORMATS)) | {"csv"}
    if "parquet" in chosen and not parquet_available():
        raise ValueError(
            f"{option} parquet: pandas needs pyarrow to write Parquet and it is not installed; "
            f"{PARQUET_HINT} (or pip install 'oversmooth[parquet]'), or leave out parquet"
        )
    return tuple(f for f in TABLE_FORMATS if f in chosen)


def _savefig(fig: Figure, fmt: str, path: Path) -> None:
    if fmt == "png":
        fig.savefig(path, dpi=DPI, format="png", pil_kwargs={"compress_level": PNG_COMPRESSION})
    else:
        fig.savefig(path, format=fmt, metadata=_METADATA[fmt])


def save_figure(
    fig: Figure, path: str | Path, formats: Iterable[str] = DEFAULT_FIGURE_FORMATS
) -> list[Path]:
    """Save ``fig`` as ``path`` (a ``.png`` name) and, for each further format of ``formats``,
    as the same name with that suffix.  Returns the files written."""
    path = Path(path)
    if path.suffix != ".png":
        raise ValueError(f"figure name {path.name!r}: expected a file name ending in .png")
    written = []
    for fmt in figure_formats(formats):
        target = path.with_suffix(f".{fmt}")
        atomic_file(target, partial(_savefig, fig, fmt))
        written.append(target)
    return written


def _flat(frame: pd.DataFrame, index: bool, index_label: str | None) -> pd.DataFrame:
    """``frame`` with the index as columns, named as the CSV header names them."""
    if not index:
        return frame
    flat = frame.reset_index()
    if index_label is not None and frame.index.nlevels == 1:
        flat = flat.rename(columns={flat.columns[0]: index_label})
    flat.columns = [str(c) for c in flat.columns]
    return flat


def _to_parquet(frame: pd.DataFrame, path: Path) -> None:
    try:
        frame.to_parquet(path, index=False)
    except Exception:  # noqa: BLE001 - pyarrow refuses mixed-type object columns
        text = frame.copy()
        for column in text.columns:
            if text[column].dtype == object:
                text[column] = text[column].map(lambda v: v if v is None else str(v))
        text.to_parquet(path, index=False)


def write_table(
    frame: pd.DataFrame,
    path: str | Path,
    formats: Iterable[str] = DEFAULT_TABLE_FORMATS,
    *,
    index: bool = False,
    index_label: str | None = None,
    float_format: str | None = None,
) -> list[Path]:
    """Write ``frame`` as ``path`` (a ``.csv`` name; ``index``, ``index_label`` and
    ``float_format`` as in ``DataFrame.to_csv``) and, with ``parquet`` in ``formats``, as
    ``NAME.parquet`` beside it (:func:`write_beside`).  Returns the files written."""
    path = _csv_name(path)
    table_formats(formats)  # refused before anything is written
    options: dict[str, Any] = {"index": index, "index_label": index_label}
    if float_format is not None:
        options["float_format"] = float_format
    atomic_file(path, lambda tmp: frame.to_csv(tmp, **options))
    return [path, *write_beside(frame, path, formats, index=index, index_label=index_label)]


def write_beside(
    frame: pd.DataFrame,
    path: str | Path,
    formats: Iterable[str] = DEFAULT_TABLE_FORMATS,
    *,
    index: bool = False,
    index_label: str | None = None,
) -> list[Path]:
    """The formats of ``formats`` other than CSV, beside the CSV ``path`` that holds ``frame``
    (written by :func:`write_table`, or by a writer of its own such as a training run's
    resumable ``history.csv``): ``NAME.parquet`` with the CSV's columns, an index written to
    the CSV included.  Returns the files written."""
    path = _csv_name(path)
    written = []
    if "parquet" in table_formats(formats):
        target = path.with_suffix(".parquet")
        atomic_file(target, partial(_to_parquet, _flat(frame, index, index_label)))
        written.append(target)
    return written


def _csv_name(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix != ".csv":
        raise ValueError(f"table name {path.name!r}: expected a file name ending in .csv")
    return path
