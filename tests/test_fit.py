"""Fits on synthetic curves with known parameters (classification: tests/test_verdict.py)."""

from __future__ import annotations

import numpy as np
import pytest

from oversmooth.fit import fit_curve, fit_exponential, fit_power_law, float_floor

K = np.arange(0, 257)


def _noisy(values, sigma, seed=0):
    rng = np.random.default_rng(seed)
    return values * np.exp(sigma * rng.standard_normal(values.shape))


@pytest.mark.parametrize("alpha", [-3.0, -1.0, -0.5, 0.4])
def test_power_law_recovered(alpha):
    v = 2.5 * np.maximum(K, 1) ** alpha
    fit = fit_power_law(K[1:], v[1:])
    assert fit.exponent == pytest.approx(alpha, abs=1e-10)
    assert fit.log_c == pytest.approx(np.log(2.5), abs=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    noisy = fit_power_law(K[1:], _noisy(v[1:], 0.2))
    assert abs(noisy.exponent - alpha) < 0.05  # sigma 0.2 on log E, 256 points
    assert noisy.ci[0] < alpha < noisy.ci[1]


@pytest.mark.parametrize("beta", [-0.1, -0.01, 0.02])
def test_exponential_recovered(beta):
    v = 0.7 * np.exp(beta * K)
    fit = fit_exponential(K[1:], v[1:])
    assert fit.exponent == pytest.approx(beta, abs=1e-12)
    noisy = fit_exponential(K[1:], _noisy(v[1:], 0.2, seed=1))
    assert abs(noisy.exponent - beta) < 0.002
    assert noisy.ci[0] < beta < noisy.ci[1]


@pytest.mark.parametrize("sigma", [0.0, 0.1])
def test_delta_bic_is_bic_power_minus_bic_exponential(sigma):
    """One sign: delta_bic = BIC(power) - BIC(exponential) > 0 favours the exponential."""
    expo = fit_curve(K, _noisy(np.exp(-0.05 * K), sigma, seed=2))
    power = fit_curve(K, _noisy(np.maximum(K, 1.0) ** -2.0, sigma, seed=3))
    assert expo.delta_bic > 0 and expo.preferred == "exponential"
    assert power.delta_bic < 0 and power.preferred == "power"
    n = power.power.n
    assert power.delta_bic == pytest.approx(n * np.log(power.power.rss / power.exponential.rss))


def test_dropped_points_are_counted():
    v = np.exp(-0.05 * K)
    v[10] = 0.0
    v[11] = -1.0
    v[12] = np.nan
    v[13] = np.inf
    fit = fit_curve(K, v, floor=1e-5)
    assert fit.dropped == {
        "nonfinite": 2,
        "nonpositive": 2,
        "float_floor": int(((v > 0) & np.isfinite(v) & (v < 1e-5) & (K > 0)).sum()),
    }
    assert fit.exponential.exponent == pytest.approx(-0.05)
    assert fit.span[1] < 256  # the floor cut the tail
    assert float_floor(1.0) == pytest.approx(np.finfo(np.float32).eps ** 2)


def test_too_few_points_and_bad_input():
    fit = fit_curve([0, 1, 2], [1.0, 0.0, -1.0])
    assert fit.power is None and fit.preferred is None
    with pytest.raises(ValueError, match="window"):
        fit_curve(K, np.ones(257), window=(0, 5))
    with pytest.raises(ValueError, match="at least 2"):
        fit_power_law([1], [1.0])
    with pytest.raises(ValueError, match="one value per layer"):
        fit_curve([1, 2, 3], [1.0, 2.0])
