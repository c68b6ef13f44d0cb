"""How concentrated the weights are: top-k operator share, Lorenz curve and Gini coefficient."""

from __future__ import annotations

import math

import numpy as np
import polars as pl


def operator_weights(weights: pl.DataFrame) -> pl.DataFrame:
    """W_op = Σ of its problems' weights, hottest first (ties by name)."""
    return (
        weights.group_by("operator").agg(pl.col("weight").sum())
        .sort(["weight", "operator"], descending=[True, False])
    )


def top_k_share(weights: pl.DataFrame, k: int) -> float:
    """Share of all weight held by the k heaviest operators."""
    ops = operator_weights(weights)["weight"].to_list()
    total = math.fsum(ops)
    return math.fsum(ops[:k]) / total if total > 0 else 0.0


def lorenz_curve(values) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative fraction of items (lightest first) against cumulative fraction of weight, from (0, 0)."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0 or v.sum() <= 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    x = np.arange(v.size + 1) / v.size
    y = np.concatenate([[0.0], np.cumsum(v) / v.sum()])
    return x, y


def gini(values) -> float:
    """Gini coefficient: 0 when every item weighs the same, → 1 when one item holds everything."""
    v = np.sort(np.asarray(values, dtype=float))
    n, total = v.size, v.sum()
    if n == 0 or total <= 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float(np.sum((2 * ranks - n - 1) * v) / (n * total))


def summary(weights: pl.DataFrame, ks: tuple[int, ...] = (1, 3, 5, 10)) -> dict:
    """Top-k operator shares and the Gini of problem and operator weights."""
    return {
        "n_problems": weights.height,
        "n_operators": weights["operator"].n_unique(),
        "top_k_operator_share": {str(k): top_k_share(weights, k) for k in ks},
        "gini_problems": gini(weights["weight"].to_numpy()),
        "gini_operators": gini(operator_weights(weights)["weight"].to_numpy()),
    }
