"""Calibration of the verdict on synthetic curves whose law and rate are known.

Each *case* is a law ``log E(k)`` over layers ``0..depth`` with its expected label and its
true asymptotic rate (the halving or doubling length of an exponential, the exponent
``alpha`` of a power law), or no single truth (a stretched exponential).  Each *noise* is how
the measured curve departs from the law: log-normal noise of ``sigma`` (natural-log units),
AR(1)-correlated across layers, heavy-tailed (Student t with 3 degrees of freedom), or one
outlier layer.  Seeds are replicates: each seed is a fresh noise draw, and for the cases with
a seed spread each seed also draws its own exponent around the case's (the truth is the
mean).

:func:`calibrate` counts, per (case, noise, seeds) cell: *right*, *inconclusive*, *wrong*
(a definite label other than the expected one, or a wrong definite curse-of-depth flag) and
how often the 95 % interval of the asymptotic rate covers the truth among the verdicts that
named the right law.  ``python scripts/calibrate_verdict.py --calibrate DIR`` writes the
report (``reports/verdict-calibration/``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Callable, Sequence

import numpy as np

from oversmooth.verdict import LABELS, Verdict, verdict

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Case", "Noise", "CASES", "NOISES", "synthetic_frame", "draw_frame", "calibrate"]

LN2 = math.log(2)


@dataclass(frozen=True)
class Case:
    """A law with its expected label, true rate (``None``: no single truth) and curse flag.

    ``law(k, spread)`` returns ``log E`` at layers ``k``; ``spread`` is the seed's standard
    normal draw, used by cases whose exponent varies from seed to seed.
    """

    name: str
    law: Callable[[np.ndarray, float], np.ndarray]
    expected: str | None
    truth: float | None = None
    curse: bool | None = False
    cosine: float | None = None
    depth: int = 256
    family: str = ""


@dataclass(frozen=True)
class Noise:
    name: str
    sigma: float
    ar: float = 0.0
    heavy: bool = False
    outlier: bool = False


def _power(alpha: float, k0: float = 0.0) -> Callable[[np.ndarray, float], np.ndarray]:
    if k0 == 0:
        return lambda k, s: alpha * np.log(np.maximum(k, 1.0))
    return lambda k, s: alpha * np.log1p(k / k0)


def _exp(beta: float) -> Callable[[np.ndarray, float], np.ndarray]:
    return lambda k, s: beta * k


def _mixed(alpha: float, beta: float) -> Callable[[np.ndarray, float], np.ndarray]:
    return lambda k, s: alpha * np.log(np.maximum(k, 1.0)) + beta * k


def _sum_exp(rates: Sequence[float], weights: Sequence[float]) -> Callable:
    def law(k: np.ndarray, s: float) -> np.ndarray:
        terms = np.stack([math.log(w) - r * k for r, w in zip(rates, weights, strict=True)])
        top = terms.max(axis=0)
        return top + np.log(np.exp(terms - top).sum(axis=0))

    return law


def _spread_power(alpha: float, tau: float) -> Callable[[np.ndarray, float], np.ndarray]:
    return lambda k, s: (alpha + tau * s) * np.log(np.maximum(k, 1.0))


def _pure_law_cases() -> list[Case]:
    """One law each: exponentials, power laws, and power laws shifted by ``k0`` (their
    asymptotic exponent reached only for ``k >> k0``), two of them by more than the depth."""
    out = [
        Case(f"exp beta={b:g}", _exp(b), "exponential-smoothing", LN2 / -b, family="exponential")
        for b in (-0.01, -0.05, -0.2)
    ]
    out += [
        Case(f"pow alpha={a:g}", _power(a), "algebraic-smoothing", a, family="power")
        for a in (-0.5, -1.0, -2.0, -6.0)
    ]
    out += [
        Case(
            f"shifted (1+k/{k0:g})^{a:g}",
            _power(a, k0),
            "algebraic-smoothing",
            a,
            family="shifted power",
        )
        for k0 in (2.0, 16.0, 64.0, 256.0)
        for a in (-1.0, -3.0)
    ]
    # shifted by more than the depth (an audit: exponential with a constant rate, noise-free)
    out += [
        Case(
            f"shifted (1+k/{k0:g})^{a:g}",
            _power(a, k0),
            "algebraic-smoothing",
            a,
            family="power law shifted beyond the depth",
        )
        for k0, a in ((512.0, -3.0), (1024.0, -6.0))
    ]
    return out


def _late_rate_cases() -> list[Case]:
    """Curves whose early layers follow another law than the late ones: sums of
    exponentials (the slowest rate is the truth) and a power start with a weak exponential."""
    return [
        Case(
            "sum of exp (0.3, 0.08, 0.03)",
            _sum_exp((0.3, 0.08, 0.03), (1.0, 0.1, 0.01)),
            "exponential-smoothing",
            LN2 / 0.03,
            family="sum of exponentials",
        ),
        Case(
            "sum of exp (0.1, 0.02)",
            _sum_exp((0.1, 0.02), (1.0, 0.05)),
            "exponential-smoothing",
            LN2 / 0.02,
            family="sum of exponentials",
        ),
        *(
            Case(
                f"k^-4 e^-0.004k, depth {depth}",
                _mixed(-4.0, -0.004),
                "exponential-smoothing",
                LN2 / 0.004,
                depth=depth,
                family="power start, weak exponential",
            )
            for depth in (64, 256)
        ),
        Case(
            "k^-2 e^-0.02k",
            _mixed(-2.0, -0.02),
            "exponential-smoothing",
            LN2 / 0.02,
            family="power start, weak exponential",
        ),
    ]


def _other_cases() -> list[Case]:
    """A seed spread of the exponent, growth, a power law that steepens (two power terms:
    exponential is wrong, its exponent is not scored), a stable curve, and a stretched
    exponential (no single truth: its labels are listed, never scored)."""
    return [
        Case(
            "pow alpha=-1, seed spread 0.2",
            _spread_power(-1.0, 0.2),
            "algebraic-smoothing",
            -1.0,
            family="seed spread",
        ),
        Case(
            "growth k^0.3, curse",
            _power(0.3),
            "power-law-growth",
            0.3,
            curse=True,
            cosine=0.999,
            family="growth",
        ),
        Case(
            "growth e^0.08k",
            _exp(0.08),
            "exponential-growth",
            LN2 / 0.08,
            cosine=0.999,
            family="growth",
        ),
        Case(
            "steepening k^-0.5 (1+k/50)^-2.5",
            lambda k, s: -0.5 * np.log(np.maximum(k, 1.0)) - 2.5 * np.log1p(k / 50),
            "algebraic-smoothing",
            None,
            family="steepening power law (two power terms; no single exponent)",
        ),
        Case("stable", _power(0.0), "stable", None, cosine=0.999, curse=True, family="stable"),
        Case(
            "stretched e^(-0.5 k^0.5)",
            lambda k, s: -0.5 * np.sqrt(k),
            None,
            family="stretched exponential (no single truth)",
        ),
    ]


def _cases() -> tuple[Case, ...]:
    """Every calibration case, in the order of the report's tables."""
    return (*_pure_law_cases(), *_late_rate_cases(), *_other_cases())


CASES = _cases()
NOISES = (
    Noise("σ 0.1", 0.1),
    Noise("σ 0.3", 0.3),
    Noise("σ 1", 1.0),
    Noise("σ 0.3, AR 0.5", 0.3, 0.5),
    Noise("σ 0.3, AR 0.9", 0.3, 0.9),
    Noise("σ 1, AR 0.9", 1.0, 0.9),
    Noise("σ 0.3, t3 tails", 0.3, heavy=True),
    Noise("σ 0.1, one outlier layer", 0.1, outlier=True),
)


def _noise(noise: Noise, size: int, rng: np.random.Generator) -> np.ndarray:
    shocks = rng.standard_t(3, size) / math.sqrt(3.0) if noise.heavy else rng.standard_normal(size)
    out = np.empty(size)
    out[0] = shocks[0]
    scale = math.sqrt(1 - noise.ar**2)
    for i in range(1, size):
        out[i] = noise.ar * out[i - 1] + scale * shocks[i]
    out *= noise.sigma
    if noise.outlier:
        out[rng.integers(1, size)] += math.log(100.0)
    return out


def draw_frame(case: Case, noise: Noise, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    """A per-layer table of ``case`` under ``noise``, one curve per seed."""
    import pandas as pd

    k = np.arange(case.depth + 1, dtype=np.float64)
    parts = []
    for s in range(seeds):
        log_e = case.law(k, float(rng.standard_normal())) + _noise(noise, len(k), rng)
        e = np.exp(log_e)
        part = {"seed": s, "layer": k.astype(int), "laplacian_energy": e}
        if case.cosine is not None:
            part["mean_cosine_similarity"] = np.r_[np.nan, np.full(case.depth, case.cosine)]
        parts.append(pd.DataFrame(part))
    return pd.concat(parts, ignore_index=True)


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
    """``E(k) = k^param`` (``law="power"``), ``e^{param k}`` (``"exponential"``) or
    ``k^alpha e^{beta k}`` (``"mixed"``, ``param = (alpha, beta)``) over layers ``0..depth``
    times log-normal noise of ``sigma``, AR(1) across layers with coefficient ``ar``."""
    if law == "power":
        fn = _power(float(param))  # type: ignore[arg-type]
    elif law == "exponential":
        fn = _exp(float(param))  # type: ignore[arg-type]
    elif law == "mixed":
        a, b = param  # type: ignore[misc]
        fn = _mixed(a, b)
    else:
        raise ValueError(f"law: expected 'power', 'exponential' or 'mixed', received {law!r}")
    case = Case(law, fn, None, cosine=cosine, depth=depth)
    return draw_frame(case, Noise("", sigma, ar), seeds, rng or np.random.default_rng(0))


def asymptotic_rate_interval(found: Verdict) -> tuple[float, float] | None:
    """The 95 % interval a verdict gives for the asymptotic rate: the model's limit when the
    late rate is still moving, else the rate itself (None without a rate)."""
    rate = found.asymptotic_rate or found.rate
    return None if rate is None else rate.interval


def _score(case: Case, found: Verdict) -> tuple[bool, bool, bool | None]:
    """(wrong, wrong curse, covered) of one verdict."""
    if case.expected is None:
        return False, False, None
    definite = found.label != "inconclusive"
    wrong = definite and found.label != case.expected
    wrong_curse = (
        found.label == case.expected
        and found.curse_of_depth is not None
        and case.curse is not None
        and found.curse_of_depth != case.curse
    )
    covered = None
    if found.label == case.expected and case.truth is not None:
        interval = asymptotic_rate_interval(found)
        if interval is not None:
            covered = interval[0] <= case.truth <= interval[1]
    return wrong, wrong_curse, covered


def calibrate(
    draws: int = 20,
    seeds: Sequence[int] = (1, 3, 10),
    cases: Sequence[Case] = CASES,
    noises: Sequence[Noise] = NOISES,
    rng_seed: int = 0,
) -> pd.DataFrame:
    """One row per (case, noise, seeds): label counts, ``right``, ``inconclusive``, ``wrong``,
    ``wrong_curse``, ``covered`` / ``scored`` (interval coverage of the true rate)."""
    import pandas as pd

    rows: list[dict] = []
    for n_seeds in seeds:
        for ci, case in enumerate(cases):
            for ni, noise in enumerate(noises):
                rng = np.random.default_rng([rng_seed, n_seeds, ci, ni])
                counts = dict.fromkeys(LABELS, 0)
                wrong = wrong_curse = covered = scored = closed = 0
                for _ in range(draws):
                    found = verdict(draw_frame(case, noise, n_seeds, rng))
                    counts[found.label] += 1
                    w, wc, cov = _score(case, found)
                    wrong += int(w or wc)
                    wrong_curse += int(wc)
                    if cov is not None:
                        scored += 1
                        covered += int(cov)
                        interval = asymptotic_rate_interval(found) or (0.0, math.inf)
                        closed += int(all(math.isfinite(v) and v != 0 for v in interval))
                right = counts.get(case.expected or "", 0) - wrong_curse
                rows.append(
                    {
                        "case": case.name,
                        "family": case.family,
                        "expected": case.expected or "(no single truth)",
                        "depth": case.depth,
                        "noise": noise.name,
                        "sigma": noise.sigma,
                        "seeds": n_seeds,
                        "draws": draws,
                        "right": right if case.expected else 0,
                        "inconclusive": counts["inconclusive"],
                        "wrong": wrong,
                        "wrong_curse": wrong_curse,
                        "covered": covered,
                        "scored": scored,
                        "closed": closed,
                        **counts,
                    }
                )
    return pd.DataFrame(rows)


def _cell(row: pd.Series) -> str:
    return f"{row['right']}/{row['inconclusive']}/{row['wrong']}"


def _summary_lines(table: pd.DataFrame) -> list[str]:
    lines = []
    for seeds, part in table.groupby("seeds", sort=True):
        scored = part[part["expected"] != "(no single truth)"]
        low, high = scored[scored["sigma"] <= 0.3], scored[scored["sigma"] > 0.3]
        cov = part["covered"].sum() / max(part["scored"].sum(), 1)
        lines.append(
            f"| {seeds} | {low['wrong'].sum()} of {low['draws'].sum()} "
            f"({low['wrong'].sum() / max(low['draws'].sum(), 1):.1%}) | {high['wrong'].sum()} of "
            f"{high['draws'].sum()} ({high['wrong'].sum() / max(high['draws'].sum(), 1):.1%}) | "
            f"{scored['inconclusive'].sum() / max(scored['draws'].sum(), 1):.0%} | "
            f"{part['covered'].sum()} of {part['scored'].sum()} ({cov:.1%}) | "
            f"{part['closed'].sum()} of {part['scored'].sum()} |"
        )
    return lines


def _calibrate_parallel(draws: int, seeds: Sequence[int], workers: int) -> pd.DataFrame:
    """:func:`calibrate` for each seed count in its own process (spawned: no fork after torch
    or BLAS threads exist), concatenated in the order of ``seeds``."""
    import multiprocessing as mp
    from functools import partial

    import pandas as pd

    if workers <= 1 or len(seeds) == 1:
        return calibrate(draws=draws, seeds=seeds)
    with mp.get_context("spawn").Pool(min(workers, len(seeds))) as pool:
        parts = pool.map(partial(_calibrate_one, draws), list(seeds))
    return pd.concat(parts, ignore_index=True)


def _calibrate_one(draws: int, seeds: int) -> pd.DataFrame:
    return calibrate(draws=draws, seeds=(seeds,))


def write_calibration(
    out: str, draws: int, seeds: Sequence[int] = (1, 3, 10), workers: int = 1
) -> None:
    """Write ``README.md`` and ``confusion.csv`` of :func:`calibrate` into ``out``."""
    import time
    from pathlib import Path

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    table = _calibrate_parallel(draws, seeds, workers)
    table.to_csv(folder / "confusion.csv", index=False)
    minutes = (time.perf_counter() - started) / 60
    lines = [
        "# Verdict calibration on synthetic curves",
        "",
        f"Generated by `python scripts/calibrate_verdict.py --calibrate {out} --draws {draws} "
        f"--seeds {','.join(str(s) for s in seeds)}` "
        f"({minutes:.1f} minutes). Counts per label: `confusion.csv`. The laws and noises are "
        "defined in `oversmooth/calibration.py`; the rules in `docs/verdict.md`.",
        "",
        "Each cell is *right / inconclusive / wrong* out of the draws. *Wrong* is a definite label "
        "other than the expected one (or a wrong definite curse-of-depth flag); *inconclusive* is "
        "the honest 'cannot tell'. *Coverage* is how often the 95 % interval of the asymptotic "
        "rate (halving or doubling length, or the power law's exponent) holds the true value, "
        "among the verdicts that named the right law; *closed* how many of those intervals are "
        "closed on both sides (an interval open on a side is honest where the layers do not "
        "bound the limit, and says less). The stretched exponential has no single "
        "truth: its labels are listed, never scored.",
        "",
        "| seeds | wrong at σ ≤ 0.3 | wrong at σ = 1 | inconclusive | coverage | closed |",
        "|---|---|---|---|---|---|",
        *_summary_lines(table),
        "",
    ]
    noises = list(dict.fromkeys(table["noise"]))
    for count, part in table.groupby("seeds", sort=True):
        n_seeds = int(count)
        lines += [f"## {n_seeds} seed{'s' if n_seeds > 1 else ''}", ""]
        lines.append("| case | " + " | ".join(noises) + " | coverage | closed |")
        lines.append("|---|" + "---|" * (len(noises) + 2))
        for case, rows in part.groupby("case", sort=False):
            by = rows.set_index("noise")
            if rows["expected"].iloc[0] == "(no single truth)":
                cells = [
                    ", ".join(f"{lab} {int(by.loc[n, lab])}" for lab in LABELS if by.loc[n, lab])
                    for n in noises
                ]
            else:
                cells = [_cell(by.loc[n]) for n in noises]
            s, c, k = rows["scored"].sum(), rows["covered"].sum(), rows["closed"].sum()
            lines.append(f"| {case} | " + " | ".join(cells) + f" | {c}/{s} | {k}/{s} |")
        lines.append("")
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python scripts/calibrate_verdict.py --calibrate OUT [--draws N] [--seeds 1,3,10]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="scripts/calibrate_verdict.py",
        description="Calibrate the verdict on synthetic curves with known laws "
        "(README.md and confusion.csv in OUT).",
    )
    parser.add_argument("--calibrate", metavar="OUT", required=True, help="output folder")
    parser.add_argument("--draws", type=int, default=20, help="curves per cell (default 20)")
    parser.add_argument("--seeds", default="1,3,10", help="seed counts (default 1,3,10)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws: expected an integer >= 1, received {args.draws}")
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        parser.error(f"--seeds: expected integers separated by commas, received {args.seeds!r}")
    write_calibration(args.calibrate, args.draws, seeds, max(1, args.workers))
    return 0
