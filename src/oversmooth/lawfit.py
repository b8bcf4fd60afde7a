"""Fits of a depth curve's law and honest intervals for anything computed from them.

The verdict (:mod:`oversmooth.verdict`) asks two questions of a per-layer curve
``y_s(k) = log E_s(k)`` (one row per seed, natural log, shared layers ``k``): *which law
does it follow as k grows* and *how fast*.  This module answers the numeric part; the
decision rules live in the verdict.

**The law family.**  Every curve is fitted by

.. math::

    y_s(k) = a_s + \\alpha \\log(k + k_0) + \\beta k,\\qquad k_0 \\in [0, k_{max}]

(one intercept per seed, shared ``alpha``, ``beta``, ``k0``).  It contains the pure power
law (``k0 = 0, beta = 0``), the *shifted* power law ``A (1 + k/k0)^alpha`` of the nonlocal
paper's Theorem 4.1 (``E0 / (1 + C E0 k)`` has ``alpha = -1``, ``k0 = 1/(C E0)``), the pure
exponential (``alpha = 0``), an exponential with a power-law prefactor or start, and it
follows the transient of a sum of exponentials (linear diffusion's) closely.  The local
decay rate is ``r(k) = -y'(k) = -alpha/(k + k0) - beta``: it tends to ``-beta`` as k grows.
So *exponential* versus *algebraic* is the question ``beta != 0`` versus ``beta = 0``, asked
of a model in which the power term can curve the way a shifted power law or a transient
does.  ``k0`` is profiled on a grid (:data:`K0_GRID_SIZE` values, geometric, plus 0); for
each ``k0`` the rest is linear least squares; the best grid value is refined (parabolic steps
in ``log k0``, or, below the grid's second value, a search linear in ``k0`` down to 0).  The
grid stops at the window's last layer ``k_max``: a shifted power law with a larger scale
changes its local rate by less than a factor 2 inside the window and is nearly a straight line
on log-linear axes; letting ``k0`` grow further makes ``alpha log(k + k0)`` collinear with
``beta k`` and no exponential could be told from anything (measured: the interval of ``beta``
of a clean ``e^{-0.01 k}`` at sigma 0.1 spanned -0.032 to +0.012 with ``k0`` up to
``4 k_max``).  Such a law is reported for what it is inside the window; a deeper run decides.

**Uncertainty: seeds are replicates.**  At initialisation each seed is a draw of the
architecture's random weights, so an interval must hold for the architecture, not for the
seeds that happened to be run.  For any quantity ``q`` computed from a fit (a rate, a
change in decades, a local slope), :class:`Evidence` combines

- the *within-curve* variance: a moving-block bootstrap of the pooled curve's residuals
  (blocks long enough for the measured lag-1 correlation), refitted with ``k0`` chosen
  again in every draw, so ``k0``'s own uncertainty is in the interval; and
- the *between-seed* variance: a bootstrap over seeds -- seeds drawn with replacement, their
  curves averaged, ``q`` computed on the average -- scaled by ``S / (S - 1)``: the variance of
  the pooled estimate under a seed-level random effect (each seed's own noise and the seeds'
  real differences).  Computing ``q`` on each seed alone instead would overstate it: a
  nonlinear fit of one noisy curve (``k0`` trading against ``alpha`` and ``beta``) scatters
  far more than the same fit of an average (measured on Pre-LN, 10 seeds: the per-seed
  ``beta`` spread 7x the pooled bootstrap's).

The variance is the within part plus whatever the between-seed variance exceeds it by; the
interval uses Student's t with Welch-Satterthwaite degrees of freedom (few seeds whose
curves disagree give wide intervals, as they should).  With one seed only the within part
exists, and the interval speaks for that seed.
"""

from __future__ import annotations

import math
import warnings
from typing import Any
from dataclasses import dataclass
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "K0_GRID_SIZE",
    "K0_MAX_FACTOR",
    "BOOTSTRAP_DRAWS",
    "PROFILE_STEPS",
    "LawModel",
    "SegmentLines",
    "Evidence",
    "block_length",
    "quantile",
    "profile_interval",
    "profile_alpha",
    "two_power_rss",
    "far_shift_rss",
    "floor_rss",
    "level_rss",
    "two_decays_rss",
    "stretched_rss",
]

K0_GRID_SIZE = 24  # geometric k0 values (plus k0 = 0) between 0.25 and K0_MAX_FACTOR * k_max
K0_MAX_FACTOR = 1.0
BOOTSTRAP_DRAWS = 300
REFINE_ROUNDS = 3  # parabolic refinements of k0 after the grid
LOW_GOLDEN = 14  # golden-section steps for a k0 below the grid's second value (0.618^14 ~ 1e-3)
LOW_PARABOLIC = 4  # parabolic steps after them


def quantile(level: float, dof: float = math.inf) -> float:
    """Two-sided quantile of ``level``: normal, or Student's t with ``dof`` degrees of freedom
    (scipy's t only when needed: importing scipy.stats costs about a second)."""
    p = 0.5 + level / 2
    if not math.isfinite(dof) or dof > 1e4:
        from statistics import NormalDist

        return NormalDist().inv_cdf(p)
    from scipy.special import stdtrit

    return float(stdtrit(max(dof, 1.0), p))


def block_length(resid: np.ndarray) -> int:
    """Block length of the moving-block bootstrap: at least ``sqrt(n)``, and long enough for
    the lag-1 autocorrelation ``rho`` of ``resid`` (``2 (1 + rho) / (1 - rho)`` layers),
    at most a third of the curve."""
    n = resid.shape[-1]
    r = resid - resid.mean()
    denom = float((r**2).sum())
    rho = float((r[1:] * r[:-1]).sum() / denom) if denom > 0 else 0.0
    rho = min(max(rho, 0.0), 0.95)
    want = max(math.sqrt(n), 2 * (1 + rho) / (1 - rho))
    return int(min(max(2, math.ceil(want)), max(2, n // 3)))


class LawModel:
    """``y = a + alpha log(k + k0) + beta k`` over fixed layers, ``k0`` profiled on a grid.

    ``exponential=False`` drops the ``beta k`` term (the shifted power law alone);
    ``shift=False`` fixes ``k0 = 0`` (a pure power law, with or without the exponential).
    :meth:`fit` fits many curves at once (rows of ``Y``).
    """

    def __init__(self, layers: np.ndarray, *, exponential: bool = True, shift: bool = True) -> None:
        k = np.asarray(layers, dtype=np.float64)
        self.k, self.scale = k, float(k.max())
        top = K0_MAX_FACTOR * self.scale
        grid = np.geomspace(0.25, top, K0_GRID_SIZE) if shift else np.zeros(0)
        self.k0 = np.concatenate([[0.0], grid])
        cols = [np.ones((len(self.k0), len(k))), np.log(k[None, :] + self.k0[:, None])]
        if exponential:
            cols.append(np.broadcast_to(k / self.scale, (len(self.k0), len(k))))
        self.design = np.stack(cols, axis=-1)  # [G, n, p]
        self.pinv = np.linalg.pinv(self.design)  # [G, p, n]
        self.exponential = exponential
        # the centred exponential column and its sum of squares, which every fit at its own
        # k0 (:meth:`_solved`) shares
        scaled = k / self.scale
        self._mean_k = float(scaled.mean())
        self._kc = scaled - self._mean_k
        self._skk = float(self._kc @ self._kc)

    def fit(self, curves: np.ndarray) -> dict[str, np.ndarray]:
        """Least-squares fit of every row of ``curves`` (``[m, n]``), ``k0`` chosen per row:
        the best grid value, then one parabolic step in ``log k0`` between its neighbours
        (kept where it lowers the residual), so ``k0`` is not quantised to the grid."""
        y = np.atleast_2d(curves)
        y = y - y.mean(axis=1, keepdims=True)  # intercept is free: centring keeps the RSS exact
        # batched products (matmul) rather than einsum: the same sums, several times faster
        coef = np.matmul(self.pinv, y.T).transpose(2, 0, 1)  # [m, G, p]
        # RSS of a least-squares projection: |y|^2 - coef . (D^T y), no fitted curves stored
        moments = np.matmul(self.design.transpose(0, 2, 1), y.T).transpose(2, 0, 1)  # D^T y
        proj = (coef * moments).sum(axis=-1)
        rss = np.maximum((y**2).sum(axis=1)[:, None] - proj, 0.0)  # [m, G]
        best = np.argmin(rss, axis=1)
        rows = np.arange(len(y))
        c, k0, r = coef[rows, best], self.k0[best], rss[rows, best]
        inner = (best >= 2) & (best <= len(self.k0) - 2)
        if inner.any():
            c, k0, r = self._refine(y, rss, best, inner, c, k0, r)
        low = best <= 1
        if len(self.k0) > 3 and low.any():
            c, k0, r = self._refine_low(y, low, c, k0, r)
        top = best == len(self.k0) - 1
        if len(self.k0) > 3 and top.any():
            c, k0, r = self._refine_top(y, top, c, k0, r)
        return {
            "alpha": c[:, 1],
            "k0": k0,
            "beta": c[:, 2] / self.scale if self.exponential else np.zeros(len(y)),
            "rss": r,
        }

    def _exact(self, y: np.ndarray, k0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients and RSS of each row of ``y`` (centred) at its own ``k0``: the centred
        columns' normal equations solved in closed form (2 x 2 at most), the RSS summed from
        the residuals themselves (not ``|y|^2`` minus the projection, which loses a noise-free
        curve's residuals to cancellation)."""
        coef, resid, _ = self._solved(y, k0)
        return coef, np.multiply(resid, resid, out=resid).sum(axis=1)

    def _solved(self, y: np.ndarray, k0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_exact`'s solution: the coefficients ``[m, p]``, the residuals ``[m, n]`` and
        the diagonal of ``(X'X)^-1`` of the slope columns ``[m, p]`` (the intercept's entry NaN;
        what a coefficient's standard error scales, :func:`_profiled`).

        The search of ``k0`` calls this tens of times per fit, on every bootstrap draw at
        once: two ``[m, n]`` buffers are reused in place, every product and sum taken in the
        order of the plain expressions (the same bits)."""
        m = len(k0)
        lc = np.add(self.k[None, :], k0[:, None])
        np.log(lc, out=lc)  # [m, n]
        mean_l = lc.sum(axis=1, keepdims=True) / lc.shape[1]
        np.subtract(lc, mean_l, out=lc)
        work = np.multiply(lc, lc)
        sll = work.sum(axis=1)
        sly = np.multiply(lc, y, out=work).sum(axis=1)
        coef = np.empty((m, 3 if self.exponential else 2))
        inv = np.empty_like(coef)
        inv[:, 0] = np.nan
        if self.exponential:
            kc, mean_k, skk = self._kc, self._mean_k, self._skk
            sky, slk = y @ kc, lc @ kc
            det = sll * skk - slk * slk
            alpha = (sly * skk - sky * slk) / det
            beta = (sky * sll - sly * slk) / det
            # y - alpha lc - beta kc, subtracted in that order
            resid = np.subtract(y, np.multiply(alpha[:, None], lc, out=work), out=work)
            np.subtract(resid, np.multiply(beta[:, None], kc[None, :], out=lc), out=resid)
            coef[:, 0] = -(alpha * mean_l[:, 0] + beta * mean_k)
            coef[:, 1], coef[:, 2] = alpha, beta
            inv[:, 1], inv[:, 2] = skk / det, sll / det
        else:
            alpha = sly / sll
            resid = np.subtract(y, np.multiply(alpha[:, None], lc, out=work), out=work)
            coef[:, 0], coef[:, 1] = -alpha * mean_l[:, 0], alpha
            inv[:, 1] = 1.0 / sll
        return coef, resid, inv

    def _refine(
        self,
        y: np.ndarray,
        rss: np.ndarray,
        best: np.ndarray,
        inner: np.ndarray,
        c: np.ndarray,
        k0: np.ndarray,
        r: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Parabolic steps in ``log k0`` around the grid minimum, the bracket shrinking by 4
        each round; a row keeps a step only where it lowers the RSS."""
        idx = np.flatnonzero(inner)
        yy, c, k0, r = y[idx], c.copy(), k0.copy(), r.copy()
        centre = np.log(self.k0[best[idx]])
        step = float(np.log(self.k0[3] / self.k0[2]))
        f = rss[idx[:, None], best[idx, None] + np.array([-1, 0, 1])]  # [m', 3]
        cur_c, cur_r = c[idx], r[idx]
        for _ in range(REFINE_ROUNDS):
            curv = f[:, 0] - 2 * f[:, 1] + f[:, 2]
            with np.errstate(divide="ignore", invalid="ignore"):
                shift = np.where(curv > 0, 0.5 * step * (f[:, 0] - f[:, 2]) / curv, 0.0)
            centre = centre + np.clip(shift, -step, step)
            step /= 4
            trial = [self._exact(yy, np.exp(centre + d)) for d in (-step, 0.0, step)]
            f = np.stack([t[1] for t in trial], axis=1)
            better = trial[1][1] < cur_r
            cur_c = np.where(better[:, None], trial[1][0], cur_c)
            cur_r = np.where(better, trial[1][1], cur_r)
            k0[idx[better]] = np.exp(centre[better])
        c[idx], r[idx] = cur_c, cur_r
        return c, k0, r

    def _refine_low(
        self, y: np.ndarray, low: np.ndarray, c: np.ndarray, k0: np.ndarray, r: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Search of ``k0`` in ``[0, grid[2]]`` for rows whose grid minimum is ``k0 = 0`` or the
        smallest positive value: golden-section steps, then parabolic ones (linear in ``k0``,
        not log: the residual sum is smooth in ``k0`` at 0); a row keeps the result only where
        it lowers the RSS.

        The geometric grid cannot reach below its first value, and the parabolic steps in
        ``log k0`` need a neighbour on each side: E0 / (1 + C E0 k) with ``k0 = 1 / (C E0) =
        0.1`` was fitted at ``k0 = 0`` with alpha -0.9815 and a 95 % interval of -0.9895 to
        -0.9735 (depth 32, no noise), excluding the theorem's -1."""
        return self._refine_between(y, low, 0.0, float(self.k0[2]), c, k0, r)

    def _refine_top(
        self, y: np.ndarray, top: np.ndarray, c: np.ndarray, k0: np.ndarray, r: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_refine_low`'s search in ``[grid[-3], grid[-1]]`` for rows whose grid minimum
        is the largest ``k0``: the parabolic steps need a neighbour above it, so a shift
        between the last two grid values was fitted at the top (E0 / (1 + k / 972.8) at depth
        1024: ``k0`` 1024 and alpha -1.04, its interval up to -1.036, excluding the theorem's
        -1; an audit)."""
        return self._refine_between(y, top, float(self.k0[-3]), float(self.k0[-1]), c, k0, r)

    def _refine_between(
        self,
        y: np.ndarray,
        rows: np.ndarray,
        low: float,
        high: float,
        c: np.ndarray,
        k0: np.ndarray,
        r: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Golden-section then parabolic search of ``k0`` in ``[low, high]`` (linear in
        ``k0``) for the ``rows`` of ``y``; a row keeps the result only where it lowers the
        RSS."""
        idx = np.flatnonzero(rows)
        yy, c, k0, r = y[idx], c.copy(), k0.copy(), r.copy()

        def rss(at: np.ndarray) -> np.ndarray:
            return self._exact(yy, at)[1]

        lo, hi = np.full(len(idx), low), np.full(len(idx), high)
        f_lo, f_hi = rss(lo), rss(hi)
        g = (math.sqrt(5) - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = rss(a), rss(b)
        for _ in range(LOW_GOLDEN):
            left = fa < fb  # the minimum lies in [lo, b]
            hi, f_hi = np.where(left, b, hi), np.where(left, fb, f_hi)
            lo, f_lo = np.where(left, lo, a), np.where(left, f_lo, fa)
            b_new = np.where(left, a, lo + g * (hi - lo))
            a_new = np.where(left, hi - g * (hi - lo), b)
            f_new = rss(np.where(left, a_new, b_new))
            fa, fb = np.where(left, f_new, fb), np.where(left, fa, f_new)
            a, b = a_new, b_new
        # a bracketing triple (lo, mid, hi) with f(mid) <= both ends, then parabolic steps
        left = fa < fb
        mid, f_mid = np.where(left, a, b), np.where(left, fa, fb)
        lo, f_lo = np.where(left, lo, a), np.where(left, f_lo, fa)
        hi, f_hi = np.where(left, b, hi), np.where(left, fb, f_hi)
        for _ in range(LOW_PARABOLIC):
            d_l, d_r = mid - lo, mid - hi
            num = d_l**2 * (f_mid - f_hi) - d_r**2 * (f_mid - f_lo)
            den = d_l * (f_mid - f_hi) - d_r * (f_mid - f_lo)
            with np.errstate(divide="ignore", invalid="ignore"):
                v = mid - 0.5 * num / den
            inside = np.isfinite(v) & (v > lo) & (v < hi) & (v != mid)
            v = np.where(inside, v, mid)
            f_v = rss(v)
            win = inside & (f_v < f_mid)
            below = v < mid
            # v better: (lo, v, mid) or (mid, v, hi); else v becomes the end on its side
            new_lo = np.where(win, np.where(below, lo, mid), np.where(inside & below, v, lo))
            new_hi = np.where(win, np.where(below, mid, hi), np.where(inside & ~below, v, hi))
            f_new_lo = np.where(
                win, np.where(below, f_lo, f_mid), np.where(inside & below, f_v, f_lo)
            )
            f_new_hi = np.where(
                win, np.where(below, f_mid, f_hi), np.where(inside & ~below, f_v, f_hi)
            )
            mid, f_mid = np.where(win, v, mid), np.where(win, f_v, f_mid)
            lo, hi, f_lo, f_hi = new_lo, new_hi, f_new_lo, f_new_hi
        coef, f = self._exact(yy, mid)
        better = f < r[idx]
        c[idx[better]], r[idx[better]], k0[idx[better]] = coef[better], f[better], mid[better]
        return c, k0, r

    def curve(self, params: dict[str, np.ndarray], at: np.ndarray) -> np.ndarray:
        """The fitted shape (no intercept) of every row at layers ``at``: ``[m, len(at)]``."""
        at = np.asarray(at, dtype=np.float64)
        return (
            params["alpha"][:, None] * np.log(at[None, :] + params["k0"][:, None])
            + params["beta"][:, None] * at[None, :]
        )

    def fitted(self, curves: np.ndarray, params: Any = None) -> np.ndarray:
        """The fitted values of every row of ``curves`` at the model's layers (``params``: a
        fit of ``curves`` already made)."""
        y = np.atleast_2d(curves)
        params = self.fit(y) if params is None else params
        shape = self.curve(params, self.k)
        return shape - shape.mean(axis=1, keepdims=True) + y.mean(axis=1, keepdims=True)


def profile_interval(
    model: LawModel, curve: np.ndarray, level: float
) -> tuple[float, float, float]:
    """An interval of ``beta`` that holds whatever ``k0`` is: the union, over every ``k0`` of
    the profile (:func:`_profile_k0`, and the fit's own) whose fit is not rejected at
    ``level``, of that fit's own interval for ``beta``.

    A bootstrap refits around the chosen ``k0`` and so inherits it: when the residual sum of
    squares is nearly flat in ``k0`` (a shifted power law whose ``alpha log(k + k0)`` trades
    against ``beta k``), it can miss that ``beta = 0`` fits as well at another ``k0``
    (measured: (1 + k/256)^-1, one seed, sigma 0.1, called exponential in 5 of 12 draws).
    Both the set of ``k0`` and each fit's interval use the residuals' effective sample size
    ``n (1 - rho) / (1 + rho)`` (lag-1 correlation ``rho`` of the best fit).  Returns
    ``(low, high, effective n)``; ``(nan, nan, n)`` for a model without ``beta``.
    """
    if not model.exponential:
        return math.nan, math.nan, float(len(curve))
    lo, hi, n_eff, _ = _profiled(model, curve, level, 2)
    return lo / model.scale, hi / model.scale, n_eff


def profile_alpha(model: LawModel, curve: np.ndarray, level: float) -> tuple[float, float, bool]:
    """:func:`profile_interval` for ``alpha``: the union of the intervals of every profiled
    ``k0`` not rejected at ``level``, and whether the grid's largest ``k0`` is among them (then a
    larger shift with a steeper ``alpha`` may fit as well, and the interval is not closed on
    that side: (1 + k/256)^-3 at depth 64 fitted ``k0`` one grid step below the top, and its
    bootstrap interval -1.13 to +0.11 missed the true -3 in every draw)."""
    lo, hi, _, top = _profiled(model, curve, level, 1)
    return lo, hi, top


#: Values of ``k0`` the profiles (:func:`profile_interval`, :func:`profile_alpha`) try between two
#: consecutive values of the fit's grid (the grid's own included): the grid alone (a step of
#: 1.44 in ``k0`` at depth 1024) left out the shifts near the best one, so the interval of a
#: curve with little noise was the nearest grid value's alone (E0 / (1 + k / 972.8) at depth
#: 1024: alpha up to -1.036, excluding the theorem's -1; an audit).
PROFILE_STEPS = 8

#: ``k0`` values a profile handles at once (``[chunk, n]`` temporaries)
_PROFILE_CHUNK = 32


def _profile_k0(model: LawModel) -> np.ndarray:
    """The ``k0`` values of a profile: the fit's grid with :data:`PROFILE_STEPS` - 1 values
    between each two (geometric between positive ones, linear from 0 to the first); the
    grid's largest last."""
    grid = model.k0
    if len(grid) < 2:
        return grid
    parts = [np.linspace(0.0, grid[1], PROFILE_STEPS + 1)[:-1]]
    for lo, hi in zip(grid[1:-1], grid[2:], strict=True):
        parts.append(np.geomspace(lo, hi, PROFILE_STEPS + 1)[:-1])
    parts.append(grid[-1:])
    return np.concatenate(parts)


def _fits_at(
    model: LawModel, y: np.ndarray, k0: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fits of the centred curve ``y`` at each of ``k0`` (:meth:`LawModel._solved`,
    :data:`_PROFILE_CHUNK` values at a time): coefficients ``[m, p]``, residual sums ``[m]``
    and the diagonal of ``(X'X)^-1`` ``[m, p]``."""
    coefs, sums, invs = [], [], []
    for start in range(0, len(k0), _PROFILE_CHUNK):
        part = k0[start : start + _PROFILE_CHUNK]
        coef, resid, inv = model._solved(np.broadcast_to(y, (len(part), len(y))), part)
        coefs.append(coef)
        sums.append((resid * resid).sum(axis=1))
        invs.append(inv)
    return np.concatenate(coefs), np.concatenate(sums), np.concatenate(invs)


def _profiled(
    model: LawModel, curve: np.ndarray, level: float, column: int
) -> tuple[float, float, float, bool]:
    """The profile over ``k0`` (:func:`_profile_k0`: the grid and values between) of
    coefficient ``column`` (1 ``alpha``, 2 ``beta`` in the model's scaled units): ``(low,
    high, effective n, top k0 not rejected)``."""
    y = np.asarray(curve, dtype=np.float64)
    y = y - y.mean()
    n, p = len(y), model.design.shape[-1]
    k0 = _profile_k0(model)
    if len(k0) > 1:  # the fit's own k0 (refined off the grid) too, before the top's place
        k0 = np.insert(k0, -1, model.fit(y[None, :])["k0"])
    coef, rss, inv = _fits_at(model, y, k0)
    best = int(np.argmin(rss))
    r = model._solved(y[None, :], k0[best : best + 1])[1][0]
    denom = float((r**2).sum())
    rho = float((r[1:] * r[:-1]).sum() / denom) if denom > 0 else 0.0
    rho = min(max(rho, 0.0), 0.95)
    n_eff = max(n * (1 - rho) / (1 + rho), p + 2.0)
    z = quantile(level)
    allowed = rss <= rss[best] * (1 + z**2 / (n_eff - p))
    sigma2 = rss[best] / (n - p) * (1 + rho) / (1 - rho)
    half = quantile(level, n_eff - p) * np.sqrt(sigma2 * inv[:, column])
    value = coef[:, column]
    lo = float(((value - half)[allowed]).min())
    hi = float(((value + half)[allowed]).max())
    return lo, hi, n_eff, bool(len(model.k0) > 1 and allowed[-1])


#: values of ``k0`` (geometric, from 0.25 to the largest :data:`TWO_POWER_FALL` allows)
#: :func:`two_power_rss` tries
TWO_POWER_GRID = 96
#: the least factor by which the two-power law's shifted term must change its local rate over
#: the window, ``(k_hi + k0) / (k_lo + k0)``: a factor ``(k + k0)^alpha`` whose rate changes
#: less stands in for an exponential there (Post-LN GCN at depth 64 in float64, halving every
#: 1.2 layers over 18 decades, was best fitted by ``(k + 64)^-83``, which vetoed its
#: exponential; so was ``e^-0.1k`` over layers 32-64 by a ``k0`` of 32)
TWO_POWER_FALL = 3.0


def two_power_rss(layers: np.ndarray, curve: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``, all >= 1)
    under the law with two power terms and no exponential factor,
    ``y = a + alpha_1 log k + alpha_2 log(k + k0)`` (``k0`` on :data:`TWO_POWER_GRID` values
    up to ``(k_hi - 3 k_lo) / 2``, where ``(k + k0)``'s rate still changes by
    :data:`TWO_POWER_FALL` over the window): the same number of free parameters as the law
    family's ``a + alpha log(k + k0) + beta k``.  A power law that steepens
    (``k^-0.5 (1 + k/50)^-2.5``, asymptotically ``k^-3``) is not in that family, whose ``beta``
    then absorbs the second power term; where this law fits at least as well, no exponential
    factor is shown.
    ``inf`` (no veto) when a layer is below 1 or the window is too narrow for any such ``k0``
    (``k_hi < 3 k_lo + 0.5``)."""
    k = np.asarray(layers, dtype=np.float64)
    if k.size < 4 or float(k.min()) < 1:
        return math.inf
    top = (float(k.max()) - TWO_POWER_FALL * float(k.min())) / (TWO_POWER_FALL - 1)
    if top <= 0.25:
        return math.inf
    y = np.asarray(curve, dtype=np.float64)
    y = y - y.mean()
    k0 = np.geomspace(0.25, top, TWO_POWER_GRID)
    design = np.stack(
        [
            np.ones((len(k0), len(k))),
            np.broadcast_to(np.log(k), (len(k0), len(k))),
            np.log(k[None, :] + k0[:, None]),
        ],
        axis=-1,
    )  # [G, n, 3]
    coef = np.matmul(np.linalg.pinv(design), y)  # [G, 3]
    resid = y[None, :] - np.matmul(design, coef[..., None])[..., 0]
    return float((resid**2).sum(axis=1).min())


#: the largest shift, in multiples of the window's last layer, :func:`far_shift_rss` tries
FAR_SHIFT_FACTOR = 4.0
FAR_SHIFT_GRID = 48
#: the least factor by which the local rate of a law :func:`far_shift_rss` or
#: :func:`stretched_rss` tries falls over the window: a law whose rate changes by less is an
#: exponential there as far as the window can tell (over layers 96-128, k^0.9's rate changes
#: by 3 %, and it vetoed half the draws of e^(-0.2 k) at 3 % noise: a review)
SLOWING_FACTOR = 1.25


def far_shift_rss(layers: np.ndarray, curve: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``) under a
    power law shifted beyond the law family's grid, ``y = a + alpha log(k + k0)`` with ``k0``
    on :data:`FAR_SHIFT_GRID` geometric values from ``K0_MAX_FACTOR * k_max`` to
    :data:`FAR_SHIFT_FACTOR` times that, with no exponential factor: one parameter fewer than
    the law family's ``a + alpha log(k + k0) + beta k``.  A power law shifted by more than the
    depth, ``(1 + k/256)^-3`` over 128 layers, is not in the family, whose ``beta`` then absorbs
    its slowly falling rate: it was ``exponential-smoothing`` with the reason
    ``exp-constant-rate``, noise-free, while its local rate ``3/(k + 256)`` tends to 0 (an
    audit).  Where this law fits at least as well, no exponential factor is shown.  The shifts
    tried are those whose local rate still falls by :data:`SLOWING_FACTOR` over the window (up to
    ``4 k_max`` for a window from layer 1, fewer for a window far from layer 0, none where even
    ``k_max``'s falls less): beyond them such a law is an exponential there, as far as any
    window of layers can tell.  ``inf`` (no veto) where no shift is left to try."""
    k = np.asarray(layers, dtype=np.float64)
    if k.size < 4:
        return math.inf
    y = np.asarray(curve, dtype=np.float64)
    k_lo, k_hi = float(k.min()), float(k.max())
    low = K0_MAX_FACTOR * k_hi
    # (k + k0)'s rate falls by (k_hi + k0) / (k_lo + k0) over the window: at least
    # SLOWING_FACTOR up to this shift
    high = min(FAR_SHIFT_FACTOR * low, (k_hi - SLOWING_FACTOR * k_lo) / (SLOWING_FACTOR - 1))
    if high <= low:
        return math.inf
    k0 = np.geomspace(low, high, FAR_SHIFT_GRID)
    return _one_term_rss(y, np.log(k[None, :] + k0[:, None]))


def _one_term_rss(curve: np.ndarray, terms: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` ``[n]`` under ``a + c t`` over the rows
    ``t`` of ``terms`` ``[G, n]`` (each fitted by least squares)."""
    y = curve - curve.mean()
    terms = terms - terms.mean(axis=1, keepdims=True)
    c = (terms @ y) / (terms**2).sum(axis=1)
    resid = y[None, :] - c[:, None] * terms
    return float((resid**2).sum(axis=1).min())


#: the exponents ``b`` of :func:`stretched_rss`'s ``k^b`` (below 1: a rate that falls to 0)
STRETCH_EXPONENTS = np.linspace(0.1, 0.9, 33)


def stretched_rss(layers: np.ndarray, curve: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``) under a
    stretched exponential, ``y = a + c k^b`` with ``b`` on :data:`STRETCH_EXPONENTS`: one
    parameter fewer than the law family.  Its local rate ``c b k^(b - 1)`` falls to 0, more
    slowly than any power law's; the family's ``beta`` absorbs it, and ``e^(-0.5 sqrt(k))`` was
    ``exponential-smoothing`` with a constant rate in 8 of 8 draws (an audit).  Where this law
    fits at least as well, no exponential factor is shown.  Only the exponents whose rate
    falls by :data:`SLOWING_FACTOR` over the window are tried (``inf``, no veto, where none
    does)."""
    k = np.asarray(layers, dtype=np.float64)
    if k.size < 4 or float(k.min()) < 1:
        return math.inf
    y = np.asarray(curve, dtype=np.float64)
    # k^b's rate falls by (k_hi / k_lo)^(1 - b) over the window: at least SLOWING_FACTOR
    span = math.log(float(k.max()) / float(k.min()))
    exponents = STRETCH_EXPONENTS[(1 - STRETCH_EXPONENTS) * span >= math.log(SLOWING_FACTOR)]
    if not exponents.size:
        return math.inf
    return _one_term_rss(y, k[None, :] ** exponents[:, None])


#: the exponents ``alpha`` of :func:`floor_rss`'s ``(k + k0)^alpha`` (a term that fades)
FLOOR_EXPONENTS = -np.geomspace(0.05, 8.0, 40)


def _refined_shift_rss(k: np.ndarray, y: np.ndarray) -> float:
    """The least residual sum of squares of ``y = a + alpha log(k + k0)`` over a continuous
    ``k0`` from ``e^-8`` past the window's start to ``K0_MAX_FACTOR k_max``."""
    from scipy.optimize import minimize_scalar

    start = max(0.0, -float(k.min()))

    def rss(t: float) -> float:
        return _one_term_rss(y, np.log(k + start + math.exp(t))[None, :])

    top = math.log(max(K0_MAX_FACTOR * float(k.max()), 1.0))
    return float(minimize_scalar(rss, bounds=(-8.0, top), method="bounded").fun)


def _shift_logs(k: np.ndarray) -> np.ndarray:
    """``log(k + k0)`` ``[S, n]`` for ``k0`` on the law family's grid (0, then geometric from
    0.25 to ``K0_MAX_FACTOR k_max``), the shifts that leave ``k + k0`` positive."""
    k_lo, k_hi = float(k.min()), float(k.max())
    shifts = np.concatenate([[0.0], np.geomspace(0.25, K0_MAX_FACTOR * k_hi, K0_GRID_SIZE)])
    shifts = shifts[k_lo + shifts > 0]
    return np.log(k[None, :] + shifts[:, None])


def _fading_powers(logs: np.ndarray) -> np.ndarray:
    """Every ``(k + k0)^alpha`` ``[S * A, n]`` for the shifts of ``logs`` (:func:`_shift_logs`)
    and ``alpha`` on :data:`FLOOR_EXPONENTS`."""
    n = logs.shape[1]
    return np.exp(FLOOR_EXPONENTS[None, :, None] * logs[:, None, :]).reshape(-1, n)


def floor_rss(layers: np.ndarray, curve: np.ndarray, sign: int) -> tuple[float, float]:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``) under a
    power law that fades onto a level, ``E = c + a (k + k0)^alpha`` (``c > 0``, ``alpha`` on
    :data:`FLOOR_EXPONENTS`, ``k0`` on the law family's grid, ``a`` of the sign that makes
    ``E`` fall, ``sign`` -1, or rise, +1, onto ``c``), and under the same power law without
    the level (``c = 0``), in that order.  ``1e-3 + (1 + k)^-1`` tends to ``1e-3``, not to 0,
    and was ``algebraic-smoothing`` like ``k^-0.95`` (an audit): where the level fits
    significantly better than no level, no power law is named.  ``c`` and ``a`` are fitted
    by least squares on ``E`` with weights ``1 / E`` (relative misfits, as on ``log E``), the
    residuals summed on ``log E``.  ``(inf, inf)`` where the window is too short."""
    k = np.asarray(layers, dtype=np.float64)
    y = np.asarray(curve, dtype=np.float64)
    if k.size < 5 or float(k.min()) + 0.25 <= 0:
        return math.inf, math.inf
    logs = _shift_logs(k)  # [S, n]
    # the law without the level with k0 refined between the grid's points: on the grid alone
    # the level made up for a k0 off it, and exact power laws ((1 + k)^-0.5 over 32 layers,
    # (7 + k)^-1 over 16) lost their label to the veto (a review)
    bare = min(_one_term_rss(y, logs), _refined_shift_rss(k, y))
    return _level_fit_rss(y, _fading_powers(logs), sign), bare


def _pair_fit_rss(y: np.ndarray, u: np.ndarray, v: np.ndarray, signs: tuple[int, int]) -> float:
    """The least residual sum of squares on ``log E`` (``y``) of ``E = a u + b v`` over the
    candidate pairs of rows of ``u`` and ``v`` (``[P, n]`` each, or ``[1, n]`` broadcast),
    with ``a`` and ``b`` of the signs ``signs``; ``inf`` where no pair fits.  ``a`` and ``b``
    are fitted by least squares on ``E`` with weights ``1 / E`` (relative misfits, as on
    ``log E``); the unweighted log residuals are the judge."""
    top = float(y.max())
    energy = np.exp(y - top)  # scaled: a and b scale with it, the log residuals do not
    w2 = (1.0 / energy) ** 2
    suu, svv, suv = (u * u * w2).sum(1), (v * v * w2).sum(1), (u * v * w2).sum(1)
    seu, sev = (u * energy * w2).sum(1), (v * energy * w2).sum(1)
    det = suu * svv - suv**2
    ok = det > 1e-300 * np.maximum(suu * svv, 1e-300)
    det = np.where(ok, det, 1.0)
    a = (svv * seu - suv * sev) / det
    b = (suu * sev - suv * seu) / det
    fitted = a[:, None] * u + b[:, None] * v
    ok &= (a * signs[0] > 0) & (b * signs[1] > 0) & (fitted > 0).all(axis=1)
    if not ok.any():
        return math.inf
    resid = (y - top)[None, :] - np.log(fitted[ok])
    return float((resid**2).sum(axis=1).min())


def _level_fit_rss(y: np.ndarray, t: np.ndarray, sign: int) -> float:
    """The least residual sum of squares on ``log E`` (``y``) of ``E = c + a t`` over the
    candidate terms ``t`` ``[T, n]`` (``c > 0``, ``a`` of the sign that makes ``E`` fall,
    ``sign`` -1, or rise, +1, onto ``c``); ``inf`` where none fits."""
    return _pair_fit_rss(y, np.ones((1, t.shape[1])), t, (1, -sign))


#: the rates of :func:`level_rss`'s and :func:`two_decays_rss`'s ``e^(-r (k - k_min))``, as
#: multiples of ``1 / span``
LEVEL_RATES = np.geomspace(0.5, 400.0, 48)


def _geometric_terms(k: np.ndarray) -> np.ndarray:
    """``e^(-r (k - k_min))`` ``[R, n]`` for the rates of :data:`LEVEL_RATES` (over the span
    of ``k``), slowest first."""
    span = max(float(k.max() - k.min()), 1.0)
    return np.exp(-(LEVEL_RATES / span)[:, None] * (k - float(k.min()))[None, :])


def two_decays_rss(layers: np.ndarray, curve: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``) under two
    geometric falls and no level, ``E = a e^(-r k) + b e^(-s k)`` (``a, b > 0``, ``r < s`` on
    :data:`LEVEL_RATES`): the alternative a level must beat.  A fast mode over a slow one,
    ``1e4 e^(-0.5k) + e^(-0.03k)``, was taken for a fall onto a level at depth 32 and 64,
    since the level beat the misfit law (a review); the slow mode is no level.  Fitted as
    :func:`level_rss`'s terms are (on ``E``, weights ``1 / E``), judged on ``log E``."""
    k = np.asarray(layers, dtype=np.float64)
    y = np.asarray(curve, dtype=np.float64)
    if k.size < 5:
        return math.inf
    terms = _geometric_terms(k)  # [R, n]
    first, second = np.triu_indices(len(LEVEL_RATES), 1)
    return _pair_fit_rss(y, terms[first], terms[second], (1, 1))


def level_rss(layers: np.ndarray, curve: np.ndarray) -> float:
    """The least residual sum of squares of ``curve`` (a log energy over ``layers``) under a
    fall onto a level, ``E = c + a t`` with ``c > 0``, ``a > 0`` and ``t`` a power term
    ``(k + k0)^alpha`` (:func:`floor_rss`'s) or a geometric one ``e^(-r k)`` (``r`` on
    :data:`LEVEL_RATES`): what a curve that has levelled off follows (``1 + 10 e^(-0.1k)``, a
    fall stopped at a layer), and a fall that goes on does not.  ``inf`` where the window is
    too short."""
    k = np.asarray(layers, dtype=np.float64)
    y = np.asarray(curve, dtype=np.float64)
    if k.size < 5 or float(k.min()) + 0.25 <= 0:
        return math.inf
    terms = np.concatenate([_fading_powers(_shift_logs(k)), _geometric_terms(k)])
    return _level_fit_rss(y, terms, -1)


class SegmentLines:
    """One straight line per segment of the layers, fitted to each curve on its own: the local
    model whose residuals the drift of a late rate is judged by.

    The law family's residuals are the wrong noise for that drift: where the family misfits a
    curve's start (a sum of exponentials' transient), a bootstrap carries that misfit into the
    late layers, and where the family fits well its residuals say nothing of how straight the
    last two quarters are.  ``masks`` are boolean ``[n]`` masks, disjoint, covering the layers.
    """

    def __init__(self, layers: np.ndarray, masks: Sequence[np.ndarray]) -> None:
        k = np.asarray(layers, dtype=np.float64)
        self.parts = []
        for mask in masks:
            centred = k[mask] - k[mask].mean()
            self.parts.append((np.asarray(mask, bool), centred, float(centred @ centred)))

    def fitted(self, curves: np.ndarray) -> np.ndarray:
        """The fitted values of every row of ``curves``: each segment's own line."""
        y_all = np.atleast_2d(np.asarray(curves, dtype=np.float64))
        out = np.array(y_all, copy=True)
        for mask, centred, ss in self.parts:
            y = y_all[:, mask]
            slope = (y @ centred) / ss if ss > 0 else np.zeros(len(y_all))
            out[:, mask] = y.mean(axis=1, keepdims=True) + slope[:, None] * centred
        return out


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its standard error and degrees of freedom, and the share of its
    variance that is the between-seed excess (what more seeds would shrink)."""

    value: float
    se: float
    dof: float
    between: float = 0.0

    def interval(self, level: float) -> tuple[float, float]:
        h = quantile(level, self.dof) * self.se
        return (self.value - h, self.value + h)

    def halfwidth(self, level: float) -> float:
        return quantile(level, self.dof) * self.se


class Evidence:
    """Bootstrap and per-seed replicates of the pooled curves, for intervals of any statistic.

    Args:
        layers: the shared layers ``[n]``.
        logs: ``[seeds, n]`` natural logs of the energy.
        model: the model whose residuals the bootstrap resamples (the full law family, or
            :class:`SegmentLines`).
        rng: the bootstrap's generator (the result is deterministic for a given seed).
        min_block: blocks at least this long (capped at a third of the curve), for residuals
            too short to show the noise's correlation that a longer curve showed.
    """

    def __init__(
        self,
        layers: np.ndarray,
        logs: np.ndarray,
        model: LawModel | SegmentLines,
        rng: np.random.Generator,
        draws: int = BOOTSTRAP_DRAWS,
        min_block: int = 2,
    ) -> None:
        self.layers = np.asarray(layers, dtype=np.float64)
        self.logs = np.atleast_2d(np.asarray(logs, dtype=np.float64))
        self.seeds, n = self.logs.shape
        self.mean = self.logs.mean(axis=0)
        fitted = model.fitted(self.mean[None, :])[0]
        resid = self.mean - fitted
        self.block = max(block_length(resid), min(min_block, max(2, n // 3)))
        starts = rng.integers(0, n, size=(draws, math.ceil(n / self.block)))
        idx = (starts[..., None] + np.arange(self.block)).reshape(draws, -1)[:, :n] % n
        self.boot = fitted[None, :] + resid[idx]  # [draws, n]
        self.within_dof = max(n / self.block - 1.0, 2.0)
        # seeds resampled with replacement, each draw's curves averaged: the pooled estimator
        # itself under the seeds' variation (a statistic of one seed's curve alone is noisier
        # than the same statistic of an average, so per-seed fits would overstate it)
        picks = rng.integers(0, self.seeds, size=(draws, self.seeds))
        self.seed_boot = self.logs[picks].mean(axis=1) if self.seeds > 1 else None

    def estimate(self, stat: Callable[[np.ndarray], np.ndarray]) -> list[Estimate]:
        """Estimates of the ``q`` statistics ``stat`` computes from curves (``[m, n] -> [m, q]``):
        point on the pooled curve, variance within (bootstrap) plus the between-seed excess."""
        point = np.atleast_2d(stat(self.mean[None, :]))[0]
        boot = np.atleast_2d(stat(self.boot))
        resampled = None if self.seed_boot is None else np.atleast_2d(stat(self.seed_boot))
        return self._combine(point, boot, resampled)

    @classmethod
    def paired(
        cls, layers: np.ndarray, first: np.ndarray, second: np.ndarray, model: LawModel, seed: int
    ) -> tuple[Evidence, Evidence]:
        """Evidence of two families of curves of the same seeds and layers, built to be
        resampled together (:meth:`estimate_pair`): one block length (the longer either's
        residuals ask for) and one generator seed, so each draw takes the same blocks and the
        same seeds from both."""

        def resid(curves: np.ndarray) -> np.ndarray:
            mean = np.atleast_2d(curves).mean(axis=0)
            return mean - model.fitted(mean[None, :])[0]

        block = max(block_length(resid(first)), block_length(resid(second)))
        return tuple(  # type: ignore[return-value]
            cls(layers, c, model, np.random.default_rng(seed), min_block=block)
            for c in (first, second)
        )

    def estimate_pair(
        self, other: Evidence, stat: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> list[Estimate]:
        """Estimates of statistics of two families of curves of the same seeds and layers (a
        ratio of their changes), resampled together: ``other`` comes from :meth:`paired`
        with ``self``, so each draw takes the same blocks and the same seeds from both, and
        what the two share cancels in the statistic."""
        if other.block != self.block or other.boot.shape != self.boot.shape:
            raise ValueError("estimate_pair: the two Evidence differ in block or draws")
        point = np.atleast_2d(stat(self.mean[None, :], other.mean[None, :]))[0]
        boot = np.atleast_2d(stat(self.boot, other.boot))
        resampled = None
        if self.seed_boot is not None and other.seed_boot is not None:
            resampled = np.atleast_2d(stat(self.seed_boot, other.seed_boot))
        return self._combine(point, boot, resampled)

    def _combine(
        self, point: np.ndarray, boot: np.ndarray, resampled: np.ndarray | None
    ) -> list[Estimate]:
        with warnings.catch_warnings():  # a statistic NaN in every draw (a flat energy's share)
            warnings.simplefilter("ignore", RuntimeWarning)
            v_w = np.nanvar(boot, axis=0, ddof=1)
            if resampled is not None:
                v_b = np.nanvar(resampled, axis=0, ddof=1) * self.seeds / (self.seeds - 1)
            else:
                v_b = np.zeros_like(v_w)
        out = []
        for j in range(len(point)):
            w, excess = float(v_w[j]), max(float(v_b[j]) - float(v_w[j]), 0.0)
            total = w + excess
            if total <= 0 or not math.isfinite(total):
                out.append(Estimate(float(point[j]), math.sqrt(max(total, 0.0)), math.inf))
                continue
            denom = (excess**2) / max(self.seeds - 1, 1) + (w**2) / self.within_dof
            dof = total**2 / denom if denom > 0 else math.inf
            out.append(Estimate(float(point[j]), math.sqrt(total), dof, excess / total))
        return out
