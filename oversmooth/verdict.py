"""The verdict on a per-layer energy table: which law, how sure, and what could not be decided.

:func:`verdict` reads the tidy per-layer table (one row per layer and seed) and
returns a :class:`Verdict` with one of six labels (SPEC §4):

- ``exponential-smoothing``: ``E(k)`` falls with a significant exponential term;
- ``algebraic-smoothing``: ``E(k)`` falls like a power law and an exponential
  term is ruled out;
- ``power-law-growth`` / ``exponential-growth``: the increasing counterparts;
- ``stable``: the fitted energy changes by less than ``STABLE_DECADES`` decades,
  with the whole interval inside that band;
- ``inconclusive``: anything the evidence does not separate -- too few usable
  layers, a change whose interval straddles the stable band, or a decay whose
  curvature does not tell the laws apart.  The summary says which.

How the laws are told apart.  Over layers ``k0..L`` the pooled curve
``y(k) = mean over seeds of log E`` (shared law, one intercept per seed) is
fitted by the *combined* model ``y = a + alpha log k + beta k``.  A power law
has ``beta = 0``, an exponential ``alpha = 0``: the two laws differ in their
curvature on log-linear against log-log axes, which the two terms measure
directly, instead of a fixed slope threshold (``k^-6`` and ``e^{-0.05k}`` can
have the same mean slope over 256 layers, never the same curvature).  A term
counts when its ``LEVEL`` interval excludes 0 and it moves the fitted curve by
at least ``MIN_TERM_DECADES`` over the window; a power law is claimed only when
the exponential term is also bounded: the upper end of its interval moves the
curve by less than ``ALGEBRAIC_MARGIN`` times the power term.  When both terms
count and the curve decays (a power-law start, then an exponential), the verdict
is exponential only if over the second half of the window the low end of the
exponential term's share exceeds the high end of the power term's share.  An
exponential's rate is always the combined fit's ``beta`` (the asymptotic halving
or doubling length), never a single-exponential fit that a power-law start would
bias; a power law's rate is the single power-law fit's ``alpha``.

Uncertainty respects the correlation of residuals from layer to layer: the
covariance of the coefficients is the larger (per linear combination) of a
moving-block bootstrap over layers (blocks of ``ceil(sqrt(n))`` layers, drawn
independently per seed, seeds averaged) and the AR(1)-inflated least-squares
covariance ``sigma^2 (X'X)^-1 (1 + rho) / (1 - rho)`` with ``rho`` the lag-1
autocorrelation of the residuals.  Seeds are not used as replicates: with the
usual three seeds a t interval has two degrees of freedom, too wide to decide.

Curse of depth (growth only): the relative change ``R(k) = E(k)/E(k-1) - 1``
is taken from the *fitted* curve, not the noisy measured one.  It is the curse
of depth when the upper end of the interval of the median fitted ``|R|`` over
the last quarter of layers is below ``CURSE_R`` and (when the table has
``cosine_prev``) the median adjacent cosine there is above ``CURSE_COSINE``;
not the curse when the lower end is above ``CURSE_R`` or the cosine is below
``CURSE_COSINE``; undecided (``None``) otherwise.

Dropped rows, all counted: layer 0 (not on a log axis), non-finite and
non-positive energies, rows with ``at_floor`` True (or, without that column,
energies below ``float_floor`` or below the single-step floor of ``dtype`` computed
from ``feature_norm``).  ``delta_bic`` is ``BIC(power) - BIC(exponential)`` of the
two single-law fits: positive favours the exponential.  It is reported, not
used to decide (it ignores the correlation of residuals).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast
from collections.abc import Sequence

import numpy as np

from oversmooth.fit import float_floor, geometric_mean

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Verdict",
    "Rate",
    "verdict",
    "LABELS",
    "MIN_LAYERS",
    "LEVEL",
    "MIN_TERM_DECADES",
    "ALGEBRAIC_MARGIN",
    "BOOTSTRAP_DRAWS",
    "STABLE_DECADES",
    "CURSE_R",
    "CURSE_COSINE",
    "synthetic_frame",
    "calibrate",
    "CALIBRATION_CASES",
]

LABELS = (
    "exponential-smoothing",
    "algebraic-smoothing",
    "power-law-growth",
    "exponential-growth",
    "stable",
    "inconclusive",
)
MIN_LAYERS = 12  # fewer usable layers: no law is claimed
LEVEL = 0.99  # two-sided level of the intervals the decisions use
MIN_TERM_DECADES = 0.1  # a law term must move the fitted curve by this much over the window
# power law claimed only if the exponential's upper bound moves the curve < this x the power term
ALGEBRAIC_MARGIN = 0.5
BOOTSTRAP_DRAWS = 400
STABLE_DECADES = 0.3  # stable: the fitted energy changes by less than a factor of 2 over the window
CURSE_R = 0.05  # curse of depth: fitted |R| in the last quarter below this ...
CURSE_COSINE = 0.9  # ... and the adjacent cosine there above this
REPORT_LEVEL = 0.95  # level of the intervals in the summary


@dataclass(frozen=True)
class Rate:
    """The fitted exponent of the chosen law and what it means in layers.

    ``name`` is ``halving_length`` / ``doubling_length`` (layers per factor 2,
    exponentials) or ``alpha`` (power laws); ``value`` and ``interval`` (95%)
    are in those units; ``exponent`` / ``exponent_interval`` are ``beta`` or ``alpha``.
    """

    law: str
    name: str
    value: float
    interval: tuple[float, float]
    exponent: float
    exponent_interval: tuple[float, float]


@dataclass(frozen=True)
class Verdict:
    """What :func:`verdict` concluded, with the evidence behind it."""

    label: str
    curse_of_depth: bool | None
    rate: Rate | None
    summary: str
    reason: str
    usable_layers: int
    seeds: int
    window: tuple[int, int] | None
    dropped: dict[str, int] = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    final_energy: float = float("nan")
    final_at_floor: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- fitting


def _z(level: float) -> float:
    """The two-sided normal quantile of ``level`` (the standard library's, not scipy.stats:
    importing that costs about a second)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass
class _Fit:
    coef: np.ndarray
    cov: np.ndarray  # coefficient covariance from the bootstrap
    cov_ar1: np.ndarray  # AR(1)-inflated least-squares covariance
    rss: float
    n: int
    fitted: np.ndarray

    def se(self, w: np.ndarray) -> float:
        w = np.asarray(w, dtype=np.float64)
        return math.sqrt(max(float(w @ self.cov @ w), float(w @ self.cov_ar1 @ w), 0.0))


def _fit(design: np.ndarray, logs: np.ndarray, idx: np.ndarray) -> _Fit:
    """Shared coefficients, one intercept per seed (column 0 of ``design`` is the constant).

    ``logs`` is ``[seeds, n]``; ``idx`` ``[draws, seeds, n]`` the layers of each bootstrap draw
    (:func:`_block_indices`).  With a balanced table the shared coefficients are the
    least-squares fit of the seed-mean curve.
    """
    seeds, n = logs.shape
    mean = logs.mean(axis=0)
    pinv = np.linalg.pinv(design)  # [p, n]
    coef = pinv @ mean
    fitted = design @ coef
    resid = logs - fitted  # [seeds, n]
    resid = resid - resid.mean(axis=1, keepdims=True)  # per-seed intercepts
    mean_resid = mean - fitted
    rss = float((mean_resid**2).sum())
    draws = resid[np.arange(seeds)[None, :, None], idx].mean(axis=1)  # [draws, n]
    boot = draws @ pinv.T  # [draws, p]
    cov = np.atleast_2d(np.cov(boot, rowvar=False))
    # AR(1)-inflated OLS covariance of the seed-mean curve
    p = design.shape[1]
    dof = max(n - p, 1)
    r = mean_resid - mean_resid.mean()
    denom = float((r**2).sum())
    rho = float((r[1:] * r[:-1]).sum() / denom) if denom > 0 else 0.0
    rho = min(max(rho, 0.0), 0.95)
    xtx_inv = pinv @ pinv.T
    cov_ar1 = xtx_inv * (rss / dof) * (1 + rho) / (1 - rho)
    return _Fit(coef, cov, cov_ar1, rss, n, fitted)


def _block_indices(seeds: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Moving-block bootstrap over layers: circular blocks of ``ceil(sqrt(n))`` layers,
    drawn independently per seed."""
    block = max(2, math.ceil(math.sqrt(n)))
    starts = rng.integers(0, n, size=(BOOTSTRAP_DRAWS, seeds, math.ceil(n / block)))
    return (starts[..., None] + np.arange(block)).reshape(BOOTSTRAP_DRAWS, seeds, -1)[..., :n] % n


# ----------------------------------------------------------------------------- input


def _prepare(frame: pd.DataFrame, energy: str) -> pd.DataFrame:
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        frame = pd.DataFrame(frame)
    for name in ("layer", energy):
        if name not in frame:
            raise ValueError(
                f"frame: expected a column {name!r} (one row per layer and seed), "
                f"received columns {list(frame.columns)}"
            )
    if "seed" not in frame:
        frame = frame.assign(seed=0)
    if frame.duplicated(["seed", "layer"]).any():
        extra = [c for c in ("step", "graph") if c in frame and frame[c].nunique() > 1]
        hint = (
            f"; it has several {' and '.join(repr(c) for c in extra)} values: pick one, e.g. "
            + " & ".join(f"frame[frame.{c} == 0]" for c in extra)
            if extra
            else "; filter the table to one run first"
        )
        raise ValueError(
            "frame: expected one row per (seed, layer), received duplicated rows" + hint
        )
    return frame.sort_values(["seed", "layer"]).reset_index(drop=True)


def _first_bad(layers: np.ndarray, bad: np.ndarray) -> int | None:
    return int(layers[bad].min()) if bad.any() else None


def _extreme_note(frame: pd.DataFrame, energy: str) -> tuple[str | None, str | None]:
    """(note, reason it blocks a verdict) for NaN/Inf and zero curves."""
    layers = frame["layer"].to_numpy()
    values = frame[energy].to_numpy(dtype=np.float64)
    nan = np.isnan(values)
    inf = np.isinf(values)
    deep = layers > 0
    if nan.any() or inf.any():
        k = _first_bad(layers, nan | inf)
        what = "NaN" if nan.any() else "Inf"
        if nan.any() and inf.any():
            what = "NaN/Inf"
        return (
            f"{what} in the layer states from layer {k} on: non-finite input features or an "
            "overflow",
            "non-finite energies",
        )
    finite = values[deep]
    if len(finite) and np.all(finite == 0):
        return (
            "all energies are 0: the graph has no edges or the features are constant",
            "zero energies",
        )
    zero = deep & (values <= 0)
    if zero.any():
        k = _first_bad(layers, zero)
        return (
            f"energy is exactly 0 from layer {k} on (underflow or a collapse to a constant)",
            None,
        )
    return None, None


# ----------------------------------------------------------------------------- the verdict


def verdict(
    frame: pd.DataFrame,
    energy: str = "laplacian_energy",
    *,
    title: str | None = None,
    dtype: str = "float32",
    hidden: int | None = None,
    start: int | None = None,
    seed: int = 0,
) -> Verdict:
    """Classify the per-layer energy curve(s) in ``frame`` (rules in the module docstring).

    Args:
        frame: per-layer table: ``layer``, the ``energy`` column, optionally ``seed``,
            ``feature_norm``, ``relative_energy``, ``cosine_prev``, ``at_floor``, ``float_floor``.
        energy: the column to classify.
        title: prefix of the one-line summary (e.g. the model and depth).
        dtype: name of the stored states' precision, for the summary's floor note.
        hidden: width of the states; without ``feature_norm`` the floor assumes an RMS row
            norm of ``sqrt(hidden)`` (no floor when both are absent).
        start: first layer of the fitted window (default 1: the curvature that separates the laws
            is largest over the most octaves).
        seed: seed of the bootstrap (the result is deterministic).
    """
    frame = _prepare(frame, energy)
    seeds = sorted(frame["seed"].unique())
    layers_all = frame["layer"].to_numpy()
    values_all = frame[energy].to_numpy(dtype=np.float64)
    last = int(layers_all.max())
    at_last = frame[frame["layer"] == last]
    final = geometric_mean(at_last[energy])
    if not np.all(np.isfinite(at_last[energy].to_numpy(dtype=np.float64))):
        final = float(at_last[energy].iloc[0])

    final64 = None  # the float64 shadow of a float32 run, when recorded
    if "float64_energy" in frame and dtype != "float64":
        final64 = geometric_mean(at_last["float64_energy"])

    # which rows are usable
    deep = layers_all > 0
    dropped = {
        "layer_0": int((~deep).sum()),
        "nonfinite": int((deep & ~np.isfinite(values_all)).sum()),
        "nonpositive": 0,
        "at_floor": 0,
    }
    finite = np.isfinite(values_all)
    nonpos = finite & (values_all <= 0) & (layers_all > 0)
    dropped["nonpositive"] = int(nonpos.sum())
    floor_col, eps = None, float(np.finfo(np.dtype(dtype)).eps)
    if "at_floor" in frame:
        at_floor = frame["at_floor"].fillna(False).astype(bool).to_numpy()
    else:
        if "float_floor" in frame:
            floor_col = frame["float_floor"].to_numpy(dtype=np.float64)
        elif "feature_norm" in frame:
            floor_col = float_floor(frame["feature_norm"].to_numpy(dtype=np.float64), eps)
        elif hidden is not None:
            floor_col = float_floor(np.full(len(frame), math.sqrt(hidden)), eps)
        at_floor = (
            (finite & ~nonpos & (values_all < floor_col))
            if floor_col is not None
            else np.zeros(len(frame), bool)
        )
    dropped["at_floor"] = int((at_floor & finite & (layers_all > 0)).sum())
    last_rows = layers_all == last
    final_at_floor = bool(at_floor[last_rows].any())
    usable = (layers_all > 0) & finite & ~nonpos & ~at_floor

    note, blocker = _extreme_note(frame, energy)
    head = f"{title}: " if title else ""

    def done(
        label: str,
        reason: str,
        body: str,
        *,
        rate: Rate | None = None,
        curse: bool | None = None,
        usable_layers: int = 0,
        window: tuple[int, int] | None = None,
        evidence: dict | None = None,
    ) -> Verdict:
        pieces = [body]
        if note and blocker is None:
            pieces.append(note)
        if final_at_floor:
            pieces.append(
                f"final energy {final:.2g} is at the {dtype} floor (those layers are left out of "
                "the fit); "
                + (
                    f"float64 gives {final64:.2g}"
                    if final64 is not None
                    else "rerun with --dtype float64"
                    if dtype != "float64"
                    else "the curve is below what float64 resolves"
                )
            )
        elif blocker is None:
            pieces.append(f"final energy {final:.2g}")
        return Verdict(
            label,
            curse,
            rate,
            head + "; ".join(pieces),
            reason,
            usable_layers,
            len(seeds),
            window,
            dropped,
            evidence or {},
            final,
            final_at_floor,
        )

    if blocker is not None:
        reason = note or blocker  # a blocker always comes with its note
        return done("inconclusive", reason, f"inconclusive: {reason}")

    # layers usable in every seed
    table = frame.assign(_ok=usable, _log=np.log(np.where(usable, values_all, 1.0)))
    first = 1 if start is None else max(1, int(start))
    dropped["before_window"] = int((table["_ok"] & (table["layer"] < first)).sum())
    table = table.assign(_ok=table["_ok"] & (table["layer"] >= first))
    ok_layers = table.groupby("layer")["_ok"].all()
    layers = ok_layers.index[ok_layers.to_numpy()].to_numpy(dtype=np.float64)
    n = len(layers)
    dropped["not_usable_in_every_seed"] = int((table["_ok"] & ~table["layer"].isin(layers)).sum())
    if n < MIN_LAYERS:
        reason = (
            f"only {n} usable layer{'s' if n != 1 else ''} (need at least {MIN_LAYERS} to fit a "
            "law; "
            f"dropped: {_dropped_text(dropped)})"
        )
        return done("inconclusive", reason, usable_layers=n, body=f"inconclusive: {reason}")
    logs = np.stack(
        [
            table[(table["seed"] == s) & table["layer"].isin(layers)]["_log"].to_numpy()
            for s in seeds
        ]
    )
    k0, kl = float(layers.min()), float(layers.max())
    window = (int(k0), int(kl))
    idx = _block_indices(len(seeds), n, np.random.default_rng(seed))
    one = np.ones(n)
    logk = np.log(layers)
    # scaled columns keep the design well conditioned; coefficients are rescaled below
    scale_k = kl
    combined = _fit(np.column_stack([one, logk, layers / scale_k]), logs, idx)
    power = _fit(np.column_stack([one, logk]), logs, idx)
    expo = _fit(np.column_stack([one, layers / scale_k]), logs, idx)

    ln10 = math.log(10)
    z = _z(LEVEL)
    span_log, span_k = math.log(kl / k0), (kl - k0) / scale_k
    w_alpha = np.array([0.0, span_log / ln10, 0.0])  # decades moved by the power term
    w_beta = np.array([0.0, 0.0, span_k / ln10])  # decades moved by the exponential term
    t_alpha, t_beta = float(w_alpha @ combined.coef), float(w_beta @ combined.coef)
    h_alpha, h_beta = z * combined.se(w_alpha), z * combined.se(w_beta)
    change, h_change = t_alpha + t_beta, z * combined.se(w_alpha + w_beta)
    alpha_c, beta_c = float(combined.coef[1]), float(combined.coef[2] / scale_k)
    sig_alpha = abs(t_alpha) > h_alpha and abs(t_alpha) >= MIN_TERM_DECADES
    sig_beta = abs(t_beta) > h_beta and abs(t_beta) >= MIN_TERM_DECADES
    delta_bic = n * math.log(max(power.rss, 1e-300) / max(expo.rss, 1e-300))
    evidence = {
        "window": list(window),
        "level": LEVEL,
        "model": "log E = a + alpha log k + beta k (shared by the seeds, one intercept per seed)",
        "alpha": alpha_c,
        "beta": beta_c,
        "power_term_decades": t_alpha,
        "power_term_halfwidth": h_alpha,
        "exponential_term_decades": t_beta,
        "exponential_term_halfwidth": h_beta,
        "change_decades": change,
        "change_halfwidth": h_change,
        "delta_bic": delta_bic,
        "delta_bic_definition": "BIC(power) - BIC(exponential); > 0 favours the exponential",
        "uncertainty": f"max of moving-block bootstrap ({BOOTSTRAP_DRAWS} draws, blocks of "
        f"{max(2, math.ceil(math.sqrt(n)))} layers) and AR(1)-inflated least squares",
    }
    common: dict[str, Any] = dict(usable_layers=n, window=window, evidence=evidence)
    where = f"layers {window[0]}-{window[1]}"
    low, high = change - h_change, change + h_change
    change_text = (
        f"{change:+.2f} decades over {where} ({LEVEL:.0%} interval {low:+.2f} to {high:+.2f})"
    )

    if abs(change) + h_change < STABLE_DECADES:
        reason = f"the fitted energy changes by {change_text}, inside +-{STABLE_DECADES:g}"
        return done("stable", reason, curse=False, body=f"stable energy: {change_text}", **common)
    if abs(change) < STABLE_DECADES or abs(change) - h_change <= 0:
        reason = (
            f"the fitted energy changes by {change_text}: cannot tell a stable curve "
            f"(within +-{STABLE_DECADES:g} decades) from a trend"
        )
        return done("inconclusive", reason, **common, body=f"inconclusive: {reason}")

    sign = -1 if change < 0 else 1
    exp_same = sig_beta and np.sign(t_beta) == sign
    pow_same = sig_alpha and np.sign(t_alpha) == sign
    beta_bound = abs(t_beta) + h_beta
    pow_clean = pow_same and not sig_beta and beta_bound < ALGEBRAIC_MARGIN * abs(t_alpha)
    zq = _z(REPORT_LEVEL)

    def decided(label: str, rate: Rate | None, reason: str, body: str) -> Verdict:
        curse: bool | None = False  # the curse of depth is a property of growing curves only
        if sign > 0:
            curse, curse_text, numbers = _curse(frame, combined, layers, scale_k, z)
            evidence.update(numbers)  # so reports can rebuild this sentence from numbers
            body += f"; {curse_text}"
        return done(label, reason, rate=rate, curse=curse, body=body, **common)

    # both terms decay: the exponential decides the late layers when, over the second half of
    # the window, even the low end of its share exceeds the high end of the power term's share
    mid = max(k0, kl / 2)
    share_exp, share_pow = (kl - mid) / (kl - k0), math.log(kl / mid) / math.log(kl / k0)
    late_exp, late_pow = (abs(t_beta) - h_beta) * share_exp, (abs(t_alpha) + h_alpha) * share_pow
    if exp_same and pow_same and sign < 0 and late_exp > late_pow:
        rate = _exp_rate(combined, scale_k, zq, sign, index=2)
        reason = (
            f"{change_text}; both terms are significant (power {t_alpha:+.2f} +- {h_alpha:.2f}, "
            f"exponential {t_beta:+.2f} +- {h_beta:.2f} decades), and over layers "
            f"{mid:.0f}-{kl:.0f} the exponential term moves the curve by at least "
            f"{late_exp:.2f} decades, the power term by at most {late_pow:.2f}: a power-law "
            "start, then exponential decay"
        )
        body = (
            f"exponential smoothing: energy halves every {rate.value:.3g} layers "
            f"({REPORT_LEVEL:.0%} interval {_interval(rate.interval)}) after a power-law start "
            f"(k^{alpha_c:.2f} e^({beta_c:.3g} k))"
        )
        return decided("exponential-smoothing", rate, reason, body)
    if exp_same and pow_same:
        trend = "decays" if sign < 0 else "grows"
        reason = (
            f"energy {trend} by {abs(change):.2f} decades over {where} but follows neither law "
            "alone: both the "
            f"power term ({t_alpha:+.2f} +- {h_alpha:.2f} decades) and the exponential term "
            f"({t_beta:+.2f} +- "
            f"{h_beta:.2f}) are significant (start-up transients, a float floor, or a changing "
            "rate; more seeds "
            "or a float-floor column may separate them)"
        )
        return done("inconclusive", reason, f"inconclusive: {reason}", **common)
    if exp_same:
        label = "exponential-smoothing" if sign < 0 else "exponential-growth"
        rate = _exp_rate(combined, scale_k, zq, sign, index=2)  # one rate definition: beta
        reason = (
            f"{change_text}; the exponential term moves the curve by {t_beta:+.2f} +- {h_beta:.2f} "
            "decades "
            f"(power term {t_alpha:+.2f} +- {h_alpha:.2f})"
        )
        verb = "halves" if sign < 0 else "doubles"
        body = (
            f"{'exponential smoothing' if sign < 0 else 'exponential growth'}: energy {verb} every "
            f"{rate.value:.3g} layers ({REPORT_LEVEL:.0%} interval {_interval(rate.interval)})"
        )
        return decided(label, rate, reason, body)
    if pow_clean:
        label = "algebraic-smoothing" if sign < 0 else "power-law-growth"
        rate = _power_rate(power, zq)
        reason = (
            f"{change_text}; the power term moves the curve by {t_alpha:+.2f} +- {h_alpha:.2f} "
            "decades, "
            f"the exponential term at most {beta_bound:.2f}"
        )
        verb = "decays" if sign < 0 else "grows"
        body = (
            f"{'algebraic smoothing' if sign < 0 else 'power-law growth'}: energy {verb} like "
            f"k^{rate.exponent:.2f} ({REPORT_LEVEL:.0%} interval {_interval(rate.interval, '.2f')})"
        )
        return decided(label, rate, reason, body)
    trend = "decays" if sign < 0 else "grows"
    if sig_beta and not exp_same:
        why = "the exponential term has the opposite sign (not monotone in one law)"
    elif pow_same:
        why = f"an exponential term of up to {beta_bound:.2f} decades cannot be ruled out"
    else:
        why = "neither the power-law nor the exponential curvature is significant"
    reason = (
        f"energy {trend} by {abs(change):.2f} decades over {where} but the laws do not separate: "
        f"{why} "
        f"(power term {t_alpha:+.2f} +- {h_alpha:.2f}, exponential term {t_beta:+.2f} +- "
        f"{h_beta:.2f} decades)"
    )
    return done("inconclusive", reason, body=f"inconclusive: {reason}", **common)


def _interval(pair: tuple[float, float], fmt: str = ".3g") -> str:
    return (
        f"{format(pair[0], fmt)}-{format(pair[1], fmt)}"
        if fmt != ".2f"
        else f"{pair[0]:.2f} to {pair[1]:.2f}"
    )


def _dropped_text(dropped: dict[str, int]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in dropped.items() if v) or "none"


def _exp_rate(fit: _Fit, scale_k: float, z: float, sign: int, index: int = 1) -> Rate:
    """The rate of the ``k / scale_k`` column ``index`` of ``fit`` (the exponential term)."""
    beta = float(fit.coef[index] / scale_k)
    h = z * fit.se(np.eye(len(fit.coef))[index]) / scale_k
    lo, hi = beta - h, beta + h
    ln2 = math.log(2)

    def length(b: float) -> float:
        return ln2 / abs(b) if b * sign > 0 else math.inf

    ends = sorted((length(lo), length(hi)))
    return Rate(
        "exponential",
        "halving_length" if sign < 0 else "doubling_length",
        length(beta),
        (ends[0], ends[1]),
        beta,
        (lo, hi),
    )


def _power_rate(fit: _Fit, z: float) -> Rate:
    alpha = float(fit.coef[1])
    h = z * fit.se(np.array([0.0, 1.0]))
    return Rate("power", "alpha", alpha, (alpha - h, alpha + h), alpha, (alpha - h, alpha + h))


def _curse(
    frame: pd.DataFrame, combined: _Fit, layers: np.ndarray, scale_k: float, z: float
) -> tuple[bool | None, str, dict[str, float | None]]:
    """Curse of depth from the fitted relative change over the last quarter (module docstring):
    the decision, its sentence, and the numbers the sentence is made of."""
    last = layers[layers >= layers.max() - (layers.max() - layers.min()) / 4]
    last = last[last > 1]
    if not len(last):
        return None, "curse of depth undecided (no layers in the last quarter)", {}
    # log E(k) - log E(k-1) from the combined law: alpha log(k/(k-1)) + beta
    d_log = np.log(last / (last - 1))
    rows = np.column_stack([np.zeros_like(last), d_log, np.full_like(last, 1.0 / scale_k)])
    mid = len(last) // 2
    order = np.argsort(rows @ combined.coef)
    w = rows[order[mid]]
    step, h = float(w @ combined.coef), z * combined.se(w)
    r_med, r_hi = abs(math.expm1(step)), max(abs(math.expm1(step - h)), abs(math.expm1(step + h)))
    r_lo = (
        0.0
        if (step - h) * (step + h) <= 0
        else min(abs(math.expm1(step - h)), abs(math.expm1(step + h)))
    )
    cos = None
    if "cosine_prev" in frame:
        c = frame[frame["layer"].isin(last)]["cosine_prev"].to_numpy(dtype=np.float64)
        c = c[np.isfinite(c)]
        cos = float(np.median(c)) if len(c) else None
    numbers = {"curse_r_median": r_med, "curse_r_high": r_hi, "curse_cosine": cos}
    if (cos is not None and cos <= CURSE_COSINE) or r_lo >= CURSE_R:
        curse: bool | None = False
    elif r_hi < CURSE_R:
        curse = True
    else:
        curse = None
    return curse, curse_sentence(curse, r_med, r_hi, cos), numbers


def curse_sentence(curse: bool | None, r_median: float, r_high: float, cosine: float | None) -> str:
    """The curse-of-depth clause of a verdict, from its numbers (also used by the reports)."""
    text = f"fitted |R| in the last quarter {r_median:.2g} (interval up to {r_high:.2g})"
    if cosine is not None:
        text += f", adjacent cosine {cosine:.3f}"
    if curse is False:
        return text + ": not the curse of depth"
    if curse is True:
        return text + ": curse of depth (vanishing relative change)"
    return text + f": curse of depth undecided (threshold |R| < {CURSE_R:g})"


# ----------------------------------------------------------------------------- calibration

#: Synthetic laws with known answers:
#: (name, law, parameter, cosine_prev, expected label, expected curse).
CALIBRATION_CASES = (
    ("exp beta=-0.01", "exponential", -0.01, None, "exponential-smoothing", False),
    ("exp beta=-0.05", "exponential", -0.05, None, "exponential-smoothing", False),
    ("exp beta=-0.2", "exponential", -0.2, None, "exponential-smoothing", False),
    ("pow alpha=-0.5", "power", -0.5, None, "algebraic-smoothing", False),
    ("pow alpha=-1", "power", -1.0, None, "algebraic-smoothing", False),
    ("pow alpha=-2", "power", -2.0, None, "algebraic-smoothing", False),
    ("pow alpha=-5", "power", -5.0, None, "algebraic-smoothing", False),
    ("pow alpha=-6", "power", -6.0, None, "algebraic-smoothing", False),
    ("growth k^0.3, curse", "power", 0.3, 0.999, "power-law-growth", True),
    ("growth k^0.3, turning layers", "power", 0.3, 0.5, "power-law-growth", False),
    ("growth e^0.08k, flat R", "exponential", 0.08, 0.999, "exponential-growth", False),
    ("stable", "power", 0.0, 0.999, "stable", False),
    # a power-law start, then exponential decay
    ("k^-2 e^-0.02k", "mixed", (-2.0, -0.02), None, "exponential-smoothing", False),
)
CALIBRATION_SIGMAS = (0.05, 0.1, 0.3, 0.5, 1.0)
CALIBRATION_AR = (0.0, 0.7)  # AR(1) coefficient of the log-noise across layers


def synthetic_frame(
    law: str,
    param: float | tuple[float, float],
    sigma: float,
    ar: float = 0.0,
    seeds: int = 3,
    depth: int = 256,
    cosine: float | None = None,
    rng: np.random.Generator | None = None,
) -> pd.DataFrame:
    """A per-layer table of ``E(k) = k^param`` (``law="power"``), ``e^{param k}``
    (``law="exponential"``) or ``k^alpha e^{beta k}`` (``law="mixed"``, ``param = (alpha,
    beta)``) over layers ``0..depth``, times log-normal noise of ``sigma``
    (natural-log units) that is AR(1) across layers with coefficient ``ar``; one curve per seed.
    ``relative_energy`` is computed from the noisy curve; ``cosine_prev`` is the constant
    ``cosine`` when given.
    """
    import pandas as pd

    if law not in ("power", "exponential", "mixed"):
        raise ValueError(f"law: expected 'power', 'exponential' or 'mixed', received {law!r}")
    rng = np.random.default_rng(0) if rng is None else rng
    k = np.arange(depth + 1, dtype=np.float64)
    alpha, beta = cast(
        "tuple[float, float]", {"power": (param, 0.0), "exponential": (0.0, param)}.get(law, param)
    )
    log_e = alpha * np.log(np.maximum(k, 1.0)) + beta * k
    frames = []
    for s in range(seeds):
        shocks = rng.standard_normal(depth + 1)
        noise = np.empty_like(shocks)
        noise[0] = shocks[0]
        for i in range(1, depth + 1):
            noise[i] = ar * noise[i - 1] + math.sqrt(1 - ar**2) * shocks[i]
        e = np.exp(log_e + sigma * noise)
        part = {
            "seed": s,
            "layer": k.astype(int),
            "laplacian_energy": e,
            "relative_energy": np.r_[np.nan, e[1:] / e[:-1] - 1],
        }
        if cosine is not None:
            part["cosine_prev"] = np.r_[np.nan, np.full(depth, cosine)]
        frames.append(pd.DataFrame(part))
    return pd.concat(frames, ignore_index=True)


def calibrate(
    draws: int = 40,
    seeds: int = 3,
    sigmas: Sequence[float] = CALIBRATION_SIGMAS,
    ars: Sequence[float] = CALIBRATION_AR,
    cases: Sequence[tuple] = CALIBRATION_CASES,
    rng_seed: int = 0,
) -> pd.DataFrame:
    """Confusion counts of :func:`verdict` on synthetic curves with known laws.

    One row per (case, sigma, ar) with the count of each label, ``right``, ``inconclusive``,
    ``wrong`` (a definite label that is not the expected one, or a definite curse flag
    that is wrong) and ``draws``.
    """
    import pandas as pd

    rng = np.random.default_rng(rng_seed)
    rows = []
    for name, law, param, cosine, want, want_curse in cases:
        for ar in ars:
            for sigma in sigmas:
                counts = dict.fromkeys(LABELS, 0)
                wrong_curse = 0
                for _ in range(draws):
                    found = verdict(
                        synthetic_frame(law, param, sigma, ar, seeds, cosine=cosine, rng=rng)
                    )
                    counts[found.label] += 1
                    if (
                        found.label == want
                        and found.curse_of_depth is not None
                        and found.curse_of_depth != want_curse
                    ):
                        wrong_curse += 1
                right = counts[want] - wrong_curse
                wrong = draws - counts[want] - counts["inconclusive"] + wrong_curse
                rows.append(
                    {
                        "case": name,
                        "expected": want,
                        "sigma": sigma,
                        "ar": ar,
                        "seeds": seeds,
                        "draws": draws,
                        "right": right,
                        "inconclusive": counts["inconclusive"],
                        "wrong": wrong,
                        "wrong_curse": wrong_curse,
                        **counts,
                    }
                )
    return pd.DataFrame(rows)


def _write_calibration(out: str, draws: int) -> None:
    import time
    from pathlib import Path

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tables = [calibrate(draws=draws, seeds=seeds) for seeds in (3, 1)]
    table = __import__("pandas").concat(tables, ignore_index=True)
    table.to_csv(folder / "confusion.csv", index=False)
    seconds = time.perf_counter() - started
    lines = [
        "# Verdict calibration on synthetic curves",
        "",
        f"Generated by `python scripts/calibrate_verdict.py --calibrate {out} --draws {draws}` "
        f"({seconds / 60:.1f} minutes wall-clock). Full counts per label: `confusion.csv`.",
        "",
        "Curves over layers 0..256 with known laws times log-normal noise of sigma (natural-log "
        "units), i.i.d. "
        "(ar 0) or AR(1)-correlated across layers (ar 0.7). *wrong* is a definite label other than "
        "the expected "
        "one, or a wrong definite curse-of-depth flag; *inconclusive* is the honest 'cannot tell'.",
        "",
    ]
    for seeds, part in table.groupby("seeds", sort=False):
        lines.append(
            f"## {seeds} seed{'s' if seeds > 1 else ''} pooled: right / inconclusive / wrong out "
            f"of {draws}"
        )
        lines.append("")
        cols = [(a, s) for a in sorted(part["ar"].unique()) for s in sorted(part["sigma"].unique())]
        lines.append("| case | " + " | ".join(f"ar {a:g}, σ {s:g}" for a, s in cols) + " |")
        lines.append("|---|" + "---|" * len(cols))
        for case in dict.fromkeys(part["case"]):
            rows = part[part["case"] == case].set_index(["ar", "sigma"])
            cells = [
                f"{rows.loc[c, 'right']}/{rows.loc[c, 'inconclusive']}/{rows.loc[c, 'wrong']}"
                for c in cols
            ]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
        total = part["draws"].sum()
        low = part[part["sigma"] <= 0.3]
        lines += [
            "",
            f"Wrong overall: {part['wrong'].sum()} of {total} ({part['wrong'].sum() / total:.1%}); "
            f"at sigma <= 0.3: {low['wrong'].sum()} of {low['draws'].sum()}; inconclusive overall "
            f"{part['inconclusive'].sum() / total:.1%}.",
            "",
        ]
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python scripts/calibrate_verdict.py --calibrate OUT [--draws N]``: write the calibration "
    "report."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="scripts/calibrate_verdict.py",
        description="Calibrate the verdict "
        "on synthetic curves with known laws (README.md and confusion.csv in OUT).",
    )
    parser.add_argument(
        "--calibrate", metavar="OUT", required=True, help="folder for README.md and confusion.csv"
    )
    parser.add_argument(
        "--draws", type=int, default=40, help="synthetic curves per cell (default 40)"
    )
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws: expected an integer >= 1, received {args.draws}")
    _write_calibration(args.calibrate, args.draws)
    return 0
