"""What a pruning table (``prune.csv``) says of its baseline, read without torch: the
unpruned accuracy, the most frequent class's share of the measured nodes, and whether the model
predicts at chance.  :mod:`oversmooth.prune` writes the table; the report and the paper
reproduction read it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CHANCE_MARGIN", "at_chance", "baseline"]

#: An unpruned accuracy at most this far above the most frequent class's share (a fraction):
#: the model predicts at chance, and its accuracy drops say nothing about its layers.  Twice the
#: binomial standard error of an accuracy near 0.3 on Cora's 1,000 test nodes is 0.029.
CHANCE_MARGIN = 0.05


def at_chance(accuracy: float, majority: float) -> bool:
    """Whether an unpruned ``accuracy`` is within :data:`CHANCE_MARGIN` of ``majority`` (the
    most frequent class's share of the measured nodes) or below it."""
    return accuracy <= majority + CHANCE_MARGIN


def baseline(frame: pd.DataFrame) -> tuple[float, float] | None:
    """A pruning table's ``(unpruned accuracy, most frequent class's share)``, the same on
    every row; None for a table without accuracies, or written before it carried them."""
    if frame.empty or not {"unpruned_accuracy", "majority_accuracy"} <= set(frame.columns):
        return None
    return float(frame["unpruned_accuracy"].iloc[0]), float(frame["majority_accuracy"].iloc[0])
