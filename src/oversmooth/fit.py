"""Decay and growth laws of per-layer curves (SPEC §4).

Two laws are fitted by least squares on the log scale over a window of layers:

- power law   ``E(k) ~ C k^alpha``      (``log E`` linear in ``log k``),
- exponential ``E(k) ~ C exp(beta k)``  (``log E`` linear in ``k``),

each with R² (on ``log E``) and a 95% confidence interval of the exponent from
the t distribution.  That interval assumes independent residuals: a layer's
deviation from the law carries into the next, so on a network's curve it is too
narrow (residuals correlated 0.9 from layer to layer over 64 layers: the nominal 95%
interval held the true rate in 36% of 400 draws).  :mod:`oversmooth.verdict`
gives intervals that respect the correlation from layer to layer, and every law,
rate and interval in ``fits.json`` and the reports is the verdict's, not this
module's.  Both fits have two parameters, so

    ``delta_bic = BIC(power) - BIC(exponential) = n log(RSS_power / RSS_exp)``:

positive favours the exponential, negative the power law (for the same reason,
a guide rather than a test).

Points that are zero, negative or non-finite cannot be fitted on a log scale;
points below the float floor (the smallest energy the stored states can
resolve, see :func:`float_floor`) are numerical noise.  All of them are dropped
and counted in :attr:`CurveFit.dropped`, never used silently.

Which law a curve follows, and whether that can be told at all, is decided by
:func:`oversmooth.verdict.verdict`; this module only fits.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "LawFit",
    "CurveFit",
    "fit_power_law",
    "fit_exponential",
    "fit_curve",
    "float_floor",
    "tail_window",
    "geometric_mean",
]


@dataclass(frozen=True)
class LawFit:
    """One law fitted on the log scale.

    ``exponent`` is ``alpha`` (power law) or ``beta`` (exponential, per layer);
    ``log_c`` the intercept ``log C``; ``ci`` the 95% interval of the exponent for independent
    residuals (too narrow on correlated ones: the module docstring).
    """

    law: str
    exponent: float
    log_c: float
    r2: float
    ci: tuple[float, float]
    rss: float
    n: int

    def predict(self, layers: ArrayLike) -> np.ndarray:
        k = np.asarray(layers, dtype=np.float64)
        x = np.log(k) if self.law == "power" else k
        return np.exp(self.log_c + self.exponent * x)

    @property
    def significant(self) -> bool:
        lo, hi = self.ci
        return bool(lo > 0 or hi < 0)


@dataclass(frozen=True)
class CurveFit:
    """Both laws on one window, with what was dropped and which law is preferred."""

    window: tuple[int, int]
    power: LawFit | None
    exponential: LawFit | None
    # BIC(power) - BIC(exponential) = n log(RSS_power / RSS_exp): > 0 favours the exponential
    delta_bic: float
    preferred: str | None
    dropped: dict[str, int] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)  # first and last layer actually fitted
    log10_change: float = float(
        "nan"
    )  # observed: mean log10 of the last 5% of points minus the first 5%

    def to_dict(self) -> dict:
        return asdict(self)


def geometric_mean(values: ArrayLike) -> float:
    """Geometric mean, the average of log-scale curves (zeros count as 1e-300, not as -inf)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(np.maximum(v, 1e-300)))))


#: A layer is at the float floor when its energy is below this many times the floor (see
#: :mod:`oversmooth.precision`: an energy above it is within a factor 2 of the exact one).
AT_FLOOR_FACTOR = 12.0


#: Machine epsilon of each floating precision a state can be stored in (numpy has no bfloat16:
#: the table, not ``np.finfo``, answers for it).
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def dtype_eps(name: str) -> float:
    """Machine epsilon of the precision ``name`` (:data:`EPS`); ``ValueError`` for another."""
    name = str(name).removeprefix("torch.")
    if name not in EPS:
        raise ValueError(f"dtype: expected one of {', '.join(EPS)}, received {name!r}")
    return EPS[name]


def float_floor(
    feature_norm: ArrayLike, dtype_eps: float = float(np.finfo(np.float32).eps)
) -> np.ndarray:
    """Smallest Laplacian energy resolvable in states stored at ``dtype_eps``:
    ``(eps * feature_norm)^2`` (one rounding error per entry of a row of norm ``feature_norm``)."""
    return (dtype_eps * np.asarray(feature_norm, dtype=np.float64)) ** 2


def _linear_fit(
    x: np.ndarray, y: np.ndarray
) -> tuple[float, float, float, tuple[float, float], float]:
    # the t quantile from scipy.special: the same function as scipy.stats.t.ppf, without
    # importing scipy.stats (about a second: optimize, docstring parsing of every distribution)
    from scipy.special import stdtrit

    n = len(x)
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx) if sxx > 0 else 0.0
    intercept = float(ym - slope * xm)
    resid = y - (intercept + slope * x)
    rss = float((resid**2).sum())
    tss = float(((y - ym) ** 2).sum())
    r2 = 1.0 - rss / tss if tss > 0 else 1.0
    if n > 2 and sxx > 0:
        se = math.sqrt(rss / (n - 2) / sxx)
        half = float(stdtrit(n - 2, 0.975)) * se
    else:
        half = math.inf
    return slope, intercept, r2, (slope - half, slope + half), rss


def _clean(
    layers: ArrayLike, values: ArrayLike, floor: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    k = np.asarray(layers, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if k.shape != v.shape or k.ndim != 1:
        raise ValueError(
            f"values: expected one value per layer, received {v.shape} values for {k.shape} layers"
        )
    nonfinite = ~np.isfinite(v)
    nonpositive = np.isfinite(v) & (v <= 0)
    below = np.zeros_like(nonfinite)
    if floor is not None:
        fl = np.broadcast_to(np.asarray(floor, dtype=np.float64), v.shape)
        below = ~nonfinite & ~nonpositive & (v < fl)
    keep = ~(nonfinite | nonpositive | below) & (k > 0)
    dropped = {
        "nonfinite": int(nonfinite.sum()),
        "nonpositive": int(nonpositive.sum()),
        "float_floor": int(below.sum()),
    }
    return k[keep], v[keep], dropped


def fit_power_law(layers: ArrayLike, values: ArrayLike) -> LawFit:
    """``E(k) ~ C k^alpha`` by least squares of ``log E`` on ``log k`` (layers > 0, values > 0)."""
    k, v, _ = _clean(layers, values, None)
    if len(k) < 2:
        raise ValueError(
            "values: a fit needs at least 2 positive finite points at layers > 0, "
            f"received {len(k)}"
        )
    slope, intercept, r2, ci, rss = _linear_fit(np.log(k), np.log(v))
    return LawFit("power", slope, intercept, r2, ci, rss, len(k))


def fit_exponential(layers: ArrayLike, values: ArrayLike) -> LawFit:
    """``E(k) ~ C exp(beta k)`` by least squares of ``log E`` on ``k``."""
    k, v, _ = _clean(layers, values, None)
    if len(k) < 2:
        raise ValueError(
            "values: a fit needs at least 2 positive finite points at layers > 0, "
            f"received {len(k)}"
        )
    slope, intercept, r2, ci, rss = _linear_fit(k, np.log(v))
    return LawFit("exponential", slope, intercept, r2, ci, rss, len(k))


def fit_curve(
    layers: ArrayLike,
    values: ArrayLike,
    window: tuple[int, int] | None = None,
    floor: ArrayLike | None = None,
) -> CurveFit:
    """Fit both laws to the points with ``window[0] <= layer <= window[1]``
    (default: all layers >= 1).

    ``floor`` (scalar or one per point) marks values below it as float-floor noise.
    Returns a fit with ``power = exponential = None`` when fewer than 3 points survive.
    """
    k_all = np.asarray(layers, dtype=np.float64)
    v_all = np.asarray(values, dtype=np.float64)
    if k_all.shape != v_all.shape or k_all.ndim != 1:
        raise ValueError(
            "values: expected one value per layer, "
            f"received {v_all.shape} values for {k_all.shape} layers"
        )
    if window is None:
        pos = k_all[k_all > 0]
        window = (int(pos.min()) if len(pos) else 1, int(k_all.max()) if len(k_all) else 1)
    lo, hi = window
    if lo < 1 or hi < lo:
        raise ValueError(f"window: expected 1 <= start <= end, received {window}")
    inside = (k_all >= lo) & (k_all <= hi)
    fl = (
        None
        if floor is None
        else np.broadcast_to(np.asarray(floor, dtype=np.float64), v_all.shape)[inside]
    )
    k, v, dropped = _clean(k_all[inside], v_all[inside], fl)
    if len(k) < 3:
        return CurveFit((lo, hi), None, None, float("nan"), None, dropped)
    power = fit_power_law(k, v)
    expo = fit_exponential(k, v)
    n = len(k)
    tiny = 1e-300
    delta = n * math.log(max(power.rss, tiny) / max(expo.rss, tiny))
    preferred = "exponential" if delta > 0 else "power"
    edge = max(1, n // 20)
    change = float(np.log10(v[-edge:]).mean() - np.log10(v[:edge]).mean())
    return CurveFit(
        (lo, hi), power, expo, delta, preferred, dropped, (int(k.min()), int(k.max())), change
    )


def tail_window(last_layer: int) -> tuple[int, int]:
    """The tail window ``[max(1, L // 4), L]`` of a curve over layers ``0..L``."""
    return (max(1, last_layer // 4), max(1, last_layer))
