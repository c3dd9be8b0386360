"""The studies' heads' last average pooling."""

from __future__ import annotations

from torch import nn


def column_pooling(columns: int) -> nn.AdaptiveAvgPool2d:
    """Average the last feature map into ``columns`` columns of one row each: ``1`` is global
    average pooling; ``3`` keeps one column per item of a triple (:mod:`experiments.kit.triples`,
    whose class depends on which item is where). The flattened output holds ``columns`` values
    per channel."""
    if columns < 1:
        raise ValueError(f"pool_columns={columns} must be at least 1")
    return nn.AdaptiveAvgPool2d(1 if columns == 1 else (1, columns))
