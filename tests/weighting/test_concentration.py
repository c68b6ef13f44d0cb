"""Concentration metrics against their textbook definitions, computed by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from weighting.concentration import gini, lorenz_curve, summary, top_k_share


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gini_is_mean_absolute_difference_over_twice_the_mean(seed):
    v = np.random.default_rng(seed).exponential(size=17)
    brute = sum(abs(a - b) for a, b in itertools.product(v, v)) / (2 * len(v) ** 2 * v.mean())
    assert gini(v) == pytest.approx(brute, rel=1e-12)


def test_gini_extremes_and_lorenz_area():
    assert gini([0.25] * 4) == pytest.approx(0.0, abs=1e-15)
    assert gini([0, 0, 0, 1]) == pytest.approx(0.75)
    v = np.random.default_rng(5).pareto(1.5, size=40)
    x, y = lorenz_curve(v)
    assert (x[0], y[0], x[-1], y[-1]) == (0.0, 0.0, 1.0, pytest.approx(1.0))
    assert np.all(np.diff(y) >= 0) and np.all(y <= x + 1e-12)
    area = np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2)
    assert gini(v) == pytest.approx(1 - 2 * area, rel=1e-12)


def test_top_k_share_groups_by_operator():
    w = pl.DataFrame({"operator": ["a", "a", "b", "c", "c", "c"], "weight": [0.2, 0.1, 0.35, 0.1, 0.15, 0.1]})
    assert top_k_share(w, 1) == pytest.approx(0.35)
    assert top_k_share(w, 2) == pytest.approx(0.70)
    assert top_k_share(w, 10) == pytest.approx(1.0)
    s = summary(w)
    assert s["n_operators"] == 3 and s["top_k_operator_share"]["3"] == pytest.approx(1.0)
    assert s["gini_operators"] == pytest.approx(gini([0.3, 0.35, 0.35]))
