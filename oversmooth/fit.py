"""Decay and growth laws of per-layer curves (SPEC §4).

Two laws are fitted by least squares on the log scale over a window of layers:

- power law   ``E(k) ~ C k^alpha``      (``log E`` linear in ``log k``),
- exponential ``E(k) ~ C exp(beta k)``  (``log E`` linear in ``k``),

each with R² (on ``log E``) and a 95% confidence interval of the exponent from
the t distribution.  Both fits have two parameters, so their BIC difference is
``n log(RSS_power / RSS_exp)``: positive favours the exponential.

Points that are zero, negative or non-finite cannot be fitted on a log scale;
points below the float floor (the smallest energy the stored states can
resolve, see :func:`float_floor`) are numerical noise.  All of them are dropped
and counted in :attr:`CurveFit.dropped`, never used silently.

Classification (:func:`classify`) of a Laplacian-energy curve, from the fit on
the full window and the fit on the tail window (the last three quarters of the
layers, where start-up transients have died out); thresholds are module
constants.  Curves at initialisation are noisy, so the rules lean on robust
features rather than on the likelihood alone (whose residuals are correlated
from layer to layer, which makes BIC overconfident):

- ``stable``: the fitted curve changes by less than ``STABLE_DECADES`` orders
  of magnitude over the window, or neither slope is significant.
- ``exponential-smoothing`` (oversmoothing), for a decreasing curve, when
  (a) the tail falls faster than ``k^-ALPHA_STEEP`` -- steeper than any
  algebraic law the theory predicts (nonlocal message passing gives
  ``E ~ k^-1``) -- unless the tail is a clean power law (R² above
  ``CLEAN_R2`` and BIC favouring it by more than ``BIC_MARGIN``); or (b) the
  exponential beats the power law by more than ``BIC_MARGIN`` on both the full
  and the tail window (a slow but persistent geometric decay).
- ``algebraic-smoothing``: any other decreasing curve -- the slow decay
  nonlocal message passing promises.
- ``power-law-growth``: an increasing curve.  It is the curse of depth when,
  over the last quarter of layers, the median ``|R(X^k)|`` is below
  ``CURSE_R`` and the median adjacent cosine similarity above ``CURSE_COSINE``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = [
    "LawFit",
    "CurveFit",
    "Classification",
    "fit_power_law",
    "fit_exponential",
    "fit_curve",
    "classify",
    "float_floor",
    "STABLE_DECADES",
    "BIC_MARGIN",
    "ALPHA_STEEP",
    "CLEAN_R2",
    "tail_window",
    "geometric_mean",
    "CURSE_R",
    "CURSE_COSINE",
]

STABLE_DECADES = 0.3  # less than a factor of 2 over the window
BIC_MARGIN = 10.0  # "very strong" evidence on the Kass-Raftery scale
ALPHA_STEEP = 4.0
CLEAN_R2 = 0.99
CURSE_R = 0.05
CURSE_COSINE = 0.9


@dataclass(frozen=True)
class LawFit:
    """One law fitted on the log scale.

    ``exponent`` is ``alpha`` (power law) or ``beta`` (exponential, per layer);
    ``log_c`` the intercept ``log C``; ``ci`` the 95% interval of the exponent.
    """

    law: str
    exponent: float
    log_c: float
    r2: float
    ci: tuple[float, float]
    rss: float
    n: int

    def predict(self, layers) -> np.ndarray:
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
    delta_bic: float  # n log(RSS_power / RSS_exp): > 0 favours the exponential
    preferred: str | None
    dropped: dict[str, int] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)  # first and last layer actually fitted
    log10_change: float = float("nan")  # observed: mean log10 of the last 5% of points minus the first 5%

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Classification:
    label: str
    reason: str
    curse_of_depth: bool = False


def geometric_mean(values) -> float:
    """Geometric mean, the average of log-scale curves (zeros count as 1e-300, not as -inf)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.mean(np.log(np.maximum(v, 1e-300)))))


def float_floor(feature_norm, dtype_eps: float = float(np.finfo(np.float32).eps)) -> np.ndarray:
    """Smallest Laplacian energy resolvable in states stored at ``dtype_eps``:
    ``(eps * feature_norm)^2`` (one rounding error per entry of a row of norm ``feature_norm``)."""
    return (dtype_eps * np.asarray(feature_norm, dtype=np.float64)) ** 2


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, tuple[float, float], float]:
    from scipy import stats

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
        half = float(stats.t.ppf(0.975, n - 2)) * se
    else:
        half = math.inf
    return slope, intercept, r2, (slope - half, slope + half), rss


def _clean(layers, values, floor) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    k = np.asarray(layers, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if k.shape != v.shape or k.ndim != 1:
        raise ValueError(f"values: expected one value per layer, received {v.shape} values for {k.shape} layers")
    nonfinite = ~np.isfinite(v)
    nonpositive = np.isfinite(v) & (v <= 0)
    below = np.zeros_like(nonfinite)
    if floor is not None:
        fl = np.broadcast_to(np.asarray(floor, dtype=np.float64), v.shape)
        below = ~nonfinite & ~nonpositive & (v < fl)
    keep = ~(nonfinite | nonpositive | below) & (k > 0)
    dropped = {"nonfinite": int(nonfinite.sum()), "nonpositive": int(nonpositive.sum()), "float_floor": int(below.sum())}
    return k[keep], v[keep], dropped


def fit_power_law(layers, values) -> LawFit:
    """``E(k) ~ C k^alpha`` by least squares of ``log E`` on ``log k`` (layers > 0, values > 0)."""
    k, v, _ = _clean(layers, values, None)
    if len(k) < 2:
        raise ValueError(f"values: a fit needs at least 2 positive finite points at layers > 0, received {len(k)}")
    slope, intercept, r2, ci, rss = _linear_fit(np.log(k), np.log(v))
    return LawFit("power", slope, intercept, r2, ci, rss, len(k))


def fit_exponential(layers, values) -> LawFit:
    """``E(k) ~ C exp(beta k)`` by least squares of ``log E`` on ``k``."""
    k, v, _ = _clean(layers, values, None)
    if len(k) < 2:
        raise ValueError(f"values: a fit needs at least 2 positive finite points at layers > 0, received {len(k)}")
    slope, intercept, r2, ci, rss = _linear_fit(k, np.log(v))
    return LawFit("exponential", slope, intercept, r2, ci, rss, len(k))


def fit_curve(layers, values, window: tuple[int, int] | None = None, floor=None) -> CurveFit:
    """Fit both laws to the points with ``window[0] <= layer <= window[1]`` (default: all layers >= 1).

    ``floor`` (scalar or one per point) marks values below it as float-floor noise.
    Returns a fit with ``power = exponential = None`` when fewer than 3 points survive.
    """
    k_all = np.asarray(layers, dtype=np.float64)
    v_all = np.asarray(values, dtype=np.float64)
    if k_all.shape != v_all.shape or k_all.ndim != 1:
        raise ValueError(f"values: expected one value per layer, received {v_all.shape} values for {k_all.shape} layers")
    if window is None:
        pos = k_all[k_all > 0]
        window = (int(pos.min()) if len(pos) else 1, int(k_all.max()) if len(k_all) else 1)
    lo, hi = window
    if lo < 1 or hi < lo:
        raise ValueError(f"window: expected 1 <= start <= end, received {window}")
    inside = (k_all >= lo) & (k_all <= hi)
    fl = None if floor is None else np.broadcast_to(np.asarray(floor, dtype=np.float64), v_all.shape)[inside]
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
    return CurveFit((lo, hi), power, expo, delta, preferred, dropped, (int(k.min()), int(k.max())), change)


def _median_tail(values, fraction: float = 0.25) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return float("nan")
    start = int(len(v) * (1 - fraction))
    return float(np.median(v[min(start, len(v) - 1) :]))


def tail_window(last_layer: int) -> tuple[int, int]:
    """The tail window ``[max(1, L // 4), L]`` of a curve over layers ``0..L``."""
    return (max(1, last_layer // 4), max(1, last_layer))


def _decades(fit: CurveFit) -> float:
    return fit.log10_change


def classify(fit: CurveFit, tail: CurveFit | None = None, relative_energy=None, cosine_prev=None) -> Classification:
    """Label a Laplacian-energy curve (rules in the module docstring).

    Args:
        fit: both laws on the full window.
        tail: both laws on the tail window (default: the full-window fit).
        relative_energy, cosine_prev: per-layer curves for the curse-of-depth test.
    """
    if fit.power is None or fit.exponential is None:
        return Classification("stable", "too few usable points to fit a law")
    tail = fit if tail is None or tail.power is None else tail
    lo, hi = fit.span
    decades = _decades(fit)
    if abs(decades) < STABLE_DECADES or not (fit.power.significant or fit.exponential.significant):
        return Classification("stable", f"the fitted energy changes by {abs(decades):.2f} decades over layers {lo}-{hi}")
    if decades < 0:
        alpha = tail.power.exponent
        clean_power = tail.power.r2 > CLEAN_R2 and tail.delta_bic < -BIC_MARGIN
        steep = alpha < -ALPHA_STEEP and not clean_power
        persistent = fit.delta_bic > BIC_MARGIN and tail.delta_bic > BIC_MARGIN
        where = f"{abs(decades):.1f} decades over layers {lo}-{hi}"
        if steep:
            return Classification(
                "exponential-smoothing",
                f"{where}; the tail (layers {tail.window[0]}-{tail.window[1]}) falls like k^{alpha:.1f}, "
                f"steeper than any algebraic law (threshold k^-{ALPHA_STEEP:g})",
            )
        if persistent:
            return Classification(
                "exponential-smoothing",
                f"{where}; the exponential fits better on the full and tail windows "
                f"(delta BIC {fit.delta_bic:.0f} and {tail.delta_bic:.0f})",
            )
        return Classification(
            "algebraic-smoothing", f"{where}; the tail decays like k^{alpha:.2f} (power law, CI {tail.power.ci[0]:.2f} to {tail.power.ci[1]:.2f})"
        )
    r_tail = _median_tail(np.abs(np.asarray(relative_energy, dtype=np.float64))) if relative_energy is not None else float("nan")
    cos_tail = _median_tail(cosine_prev) if cosine_prev is not None else float("nan")
    curse = bool(r_tail < CURSE_R and cos_tail > CURSE_COSINE)
    reason = f"energy grows like k^{fit.power.exponent:.2f}, {decades:.1f} decades over layers {lo}-{hi}"
    if not math.isnan(r_tail):
        reason += f"; last-quarter median |R| {r_tail:.2g}, adjacent cosine {cos_tail:.3f}"
    if curse:
        reason += ": curse of depth"
    return Classification("power-law-growth", reason, curse)
