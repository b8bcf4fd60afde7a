"""The command line that reproduces a report folder, built from its ``config.json``.

Only options whose value differs from the command's default are written, so the line is
short.  The options come from the one option table (:data:`oversmooth.config.OPTIONS`), the
one the command-line parser reads, so passing the line to the CLI gives back the same
configuration.
"""

from __future__ import annotations

import shlex
from typing import Any
from collections.abc import Mapping

from oversmooth.config import (
    PRUNE_DEFAULTS,
    command_options,
    options_of,
    upgrade_record,
    with_values,
)

__all__ = ["reproduce_command"]


def reproduce_command(config: Mapping[str, Any]) -> str:
    """``oversmooth analyze ...`` / ``compare ...`` / ``train ...`` for a folder's config.json
    (in today's layout or an older one, :func:`~oversmooth.config.upgrade_record`).

    A prune folder's line is a prune line, its options those that differ from prune's own
    defaults (:data:`~oversmooth.config.PRUNE_DEFAULTS`).  Raises ValueError for a
    configuration no single command wrote (reproduce, bench and sweep folders have their own
    records)."""
    from oversmooth.run_configs import AnalysisConfig, ComparisonConfig, TrainConfig

    record = upgrade_record(config)
    command = record.get("command")
    skip: tuple[str, ...] = ()
    cls: type[AnalysisConfig | ComparisonConfig | TrainConfig]
    if command in ("analyze", "prune"):
        name, cls = str(command), AnalysisConfig
        if record.get("checkpoint"):  # it fixes these; the line names the checkpoint instead
            fixed = AnalysisConfig.fixed_by_checkpoint
            skip = tuple(f for f, _ in options_of(cls) if fixed(f))
    elif command == "compare":
        name, cls = "compare", ComparisonConfig
    elif command == "train":
        name, cls = "train", TrainConfig
    else:
        raise ValueError(
            f"config command {command!r}: expected analyze, prune, compare or train to build a "
            "command"
        )
    default = cls().to_dict()
    if command == "prune":
        default = with_values(default, PRUNE_DEFAULTS)
    parts = ["oversmooth", name, *command_options(cls, record, default, skip)]
    return shlex.join(parts)
