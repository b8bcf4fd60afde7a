"""The verdict in words (oversmooth.report.prose): one function for a live Verdict and for a
fits.json record, each reason code's sentence, and records written by older versions."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import oversmooth
from oversmooth.outputs import json_text
from oversmooth.report.prose import (
    reason_prose,
    reason_text,
    verdict_prose,
    verdict_text,
    with_prose,
)
from oversmooth.verdict import Verdict, verdict

#: the numbers every law sentence reads (hand-checkable)
NUMBERS = {
    "change_decades": -1.5,
    "change_halfwidth": 0.25,
    "window": [1, 64],
    "level": 0.99,
    "beta": -0.01,
    "beta_interval": [-0.02, 0.005],
    "power_term_decades": -0.5,
    "k0": 2.0,
}
CHANGE = "-1.50 decades over layers 1-64 (99% interval -1.75 to -1.25)"
TERMS = (
    "exponential factor e^(beta k) with beta -0.01 (99% interval -0.02 to 0.005), power term "
    "-0.50 decades, shift k0 2"
)
# an undecided law's interval holds within that law only (the curve's limit may lie outside)
OPEN_TERMS = TERMS.replace(
    "0.005)", "0.005 within this law; the curve's limiting rate may lie outside)"
)
# and its change is said with its interval (the law's change misfits where laws overlap)
OPEN_CHANGE = "energy decays by 1.50 decades (99% interval 1.25 to 1.75) over layers 1-64 but "


def _found(reason: str, label: str = "inconclusive", **fields) -> Verdict:
    return Verdict(label=label, reason=reason, seeds=2, trend="decay", evidence=NUMBERS, **fields)


@pytest.mark.parametrize(
    ("reason", "label", "why"),
    [
        ("exp-constant-rate", "exponential-smoothing", f"{CHANGE}; the {TERMS}: the local rate "),
        ("exp-late-rate-holds", "exponential-smoothing", f"{CHANGE}; the {TERMS}: the late local "),
        (
            "power-law",
            "algebraic-smoothing",
            f"{CHANGE}; the {TERMS}: the law fitted has no exponential factor halving or "
            "doubling faster than every 4x64 layers, the local rate falls like 1/k over these "
            "layers (a sum of exponentials",
        ),
        (
            "laws-overlap",
            "inconclusive",
            f"{OPEN_CHANGE}the laws do not separate: an exponential factor as fast as halving "
            f"every {math.log(2) / 0.02:.3g} layers",
        ),
        ("opposite-sign", "inconclusive", OPEN_CHANGE),
        ("small-exponential", "inconclusive", OPEN_CHANGE),
        (
            "two-powers",
            "inconclusive",
            f"{OPEN_CHANGE}the laws do not separate: the exponential factor is significant in the "
            "law fitted, but a power law that steepens",
        ),
        ("stable", "stable", f"the fitted energy changes by {CHANGE}, inside +-0.3"),
        ("no-trend", "inconclusive", f"the fitted energy changes by {CHANGE}: cannot tell"),
    ],
)
def test_each_reason_code_is_said_from_its_numbers(reason, label, why):
    text = reason_text(_found(reason, label))
    assert text.startswith(why), text
    if label == "inconclusive":
        assert OPEN_TERMS in text or reason == "no-trend"
    else:
        assert TERMS in text or reason == "stable"


def test_an_inconclusive_line_says_its_reason_and_the_notes():
    k = np.arange(33)
    values = np.exp(-0.1 * k)
    values[20:] = np.inf
    found = verdict(pd.DataFrame({"layer": k, "laplacian_energy": values}))
    assert (found.reason, found.notes[0]["values"]) == ("nonfinite", "Inf")
    line = verdict_text(found, "T")
    assert line == (
        "T: inconclusive: Inf in the layer states from layer 20 on: non-finite input features "
        "or an overflow"
    )
    few = Verdict(
        label="inconclusive",
        reason="few-layers",
        seeds=1,
        usable_layers=1,
        dropped={"layer_0": 1, "at_floor": 2, "nonfinite": 0},
        final_energy=0.5,
    )
    assert verdict_text(few) == (
        "inconclusive: only 1 usable layer (need at least 12 to fit a law; dropped: 1 row at "
        "layer 0 (the input, never fitted), 2 rows at the float floor); final energy 0.5"
    )


@pytest.mark.parametrize(
    ("dtype", "f64", "tail"),
    [
        (
            "float32",
            None,
            "measure it in float64 (--dtype float64; a model of your own: model.double())",
        ),
        (
            "float32",
            3.0e-9,
            "float64 gives 3e-09 (its own floor unchecked: a float64 run checks it)",
        ),
        ("float64", None, "the curve is below what float64 resolves"),
    ],
)
def test_the_floor_note_survives_fits_json(dtype, f64, tail):
    """The floor is a record of the verdict (final energy, dtype, float64 energy), so the line
    read back from fits.json is the live one."""
    floor = {"code": "floor", "final_energy": 1.0e-12, "dtype": dtype, "float64_energy": f64}
    found = _found("exp-constant-rate", "inconclusive", notes=[floor], final_energy=1.0e-12)
    stored = json.loads(json_text({"evidence": found.to_dict()}))
    line = verdict_text(found, "T")
    assert line.endswith(
        f"; final energy 1e-12 is at the {dtype} floor (those layers are left out of the fit); "
        + tail
    )
    assert verdict_prose(stored, "T") == line


def test_with_prose_writes_the_sentences_beside_the_numbers():
    found = _found("laws-overlap", final_energy=0.25)
    record = {"classification": "inconclusive", "reason": found.reason, "evidence": found.to_dict()}
    written = with_prose(record, "T")
    assert list(written) == ["classification", "reason", "verdict", "evidence"]
    assert written["reason"] == reason_text(found) != found.reason
    assert written["verdict"] == verdict_text(found, "T") == verdict_prose(record, "T")
    assert written["verdict"].endswith("; final energy (geometric mean over 2 seeds) 0.25")
    assert reason_prose(record) == reason_text(found)


def test_records_of_older_versions_keep_their_words():
    """fits.json written before the verdict held codes: its evidence has ``summary`` and a
    ``reason`` in words; those are shown as written, never parsed as codes."""
    old = {
        "classification": "stable",
        "reason": "the fitted energy changes by +0.01 decades",
        "verdict": "Post-LN SAN, 64 layers on cora: stable energy ...",
        "evidence": {
            "label": "stable",
            "summary": "Post-LN SAN, 64 layers on cora: stable energy ...",
            "reason": "the fitted energy changes by +0.01 decades",
            "evidence": {"uncertainty": "moving-block bootstrap (...)"},
        },
    }
    assert verdict_prose(old, "ignored title") == old["verdict"]
    assert verdict_text(old["evidence"]) == old["verdict"]
    assert reason_prose(old) == reason_text(old["evidence"]) == old["reason"]
    assert with_prose(old, "T") == old
    # numbers this version cannot read (an unknown code) fall back to the stored line too
    odd = {**old, "evidence": {**_found("a-future-code").to_dict()}}
    assert verdict_prose(odd, "T") == old["verdict"]
    assert reason_prose(odd) == old["reason"]


def test_the_package_root_says_a_verdict():
    assert oversmooth.verdict_text is verdict_text


def test_open_interval_ends_and_a_shift_at_its_bound_are_said_in_words():
    """No ``inf`` reaches a reader: an interval with no upper end reads "or more", a late slope
    of the wrong sign "no late halving", and a k0 at the top of its grid says so."""
    from oversmooth.report.prose import _late_clause, _shift_text, length_span, span_text

    assert span_text((11.5, None)) == "11.5 or more" and span_text((None, None)) == "unbounded"
    assert span_text((-math.inf, 3.0)) == "up to 3" and span_text((1.0, 2.0)) == "1-2"
    # a halving length open toward the fast side read "0-1.49" (the atlas's GAT)
    assert length_span((0.0, 1.488)) == "up to 1.49" and length_span((1.0, 2.0)) == "1-2"
    assert length_span((0.883, None)) == "0.883 or more"
    late = {"late_slope_interval": [-0.5, 0.06], "late_window": [9, 16]}
    assert _late_clause({**late, "late_slope": -0.2}, True) == (
        f"late halving length {math.log(2) / 0.2:.3g} layers over layers 9-16 "
        f"(95% interval {math.log(2) / 0.5:.3g} or more)"
    )
    flat = _late_clause({**late, "late_slope": 0.01}, True)
    assert flat.startswith("no late halving: the energy does not decay over layers 9-16")
    assert "inf" not in flat
    assert _shift_text(16.0, [1, 16]) == "16 (the largest the fit tries: the shift may be larger)"
    assert _shift_text(2.0, [1, 16]) == "2" and _shift_text(16.0, None) == "16"


@pytest.mark.parametrize(
    ("trend", "collapse", "sf", "nd", "said"),
    [
        (
            "growth",
            None,
            -1.08,
            1.52,
            "; the directions still converge: the scale-free energy "
            "falls (-1.1 decades) while the squared feature norm changes +1.5 decades",
        ),
        ("growth", None, -0.1, 0.6, ""),  # inside the stable band: nothing to say
        (
            "decay",
            "oversmoothing",
            -11.0,
            3.8e-8,
            "; the nodes converge (scale-free energy -11 decades, squared norm 0 decades)",
        ),
        (  # the nodes converge too, by less than a third of the fall: said, not denied
            "decay",
            "norm-collapse",
            -2.0,
            -84.0,
            "; mostly norm collapse: the squared feature norm falls by 84 decades; the nodes "
            "also converge, by less (scale-free energy -2 decades)",
        ),
        (
            "decay",
            "norm-collapse",
            -0.1,
            -84.0,
            "; mostly norm collapse, not oversmoothing: the "
            "squared feature norm falls by 84 decades, the scale-free energy stays within 0.3 "
            "decades (-0.1 decades)",
        ),
        (  # a rise said as one (it read "changes only +5.5 decades": an audit)
            "decay",
            "norm-collapse",
            5.5,
            -11.0,
            "; mostly norm collapse, not oversmoothing: the squared feature norm falls by 11 "
            "decades, the scale-free energy rises (+5.5 decades: the node directions spread "
            "apart)",
        ),
    ],
)
def test_the_norm_and_direction_clause(trend, collapse, sf, nd, said):
    """What the energy's change is made of, for a decay and for a growth; a zero reads 0, a
    fall is never a negative fall."""
    from oversmooth.report.prose import _collapse_clause

    ev = {"scale_free_decades": sf, "norm_decades": nd}
    assert _collapse_clause({"trend": trend, "collapse": collapse}, ev) == said


def test_a_final_energy_at_the_float_floor_is_marked_in_the_table():
    """A float32 Post-LN at depth 400 read 6.6e-13 in the compare table with no mark, while
    its verdict said the final layer is at the floor (an audit)."""
    import pandas as pd

    from oversmooth.report.prose import energy_table

    summary = pd.DataFrame(
        {
            "model": ["postln"] * 4,
            "dataset": ["karate"] * 4,
            "depth": [2, 2, 400, 400],
            "seed": [0, 1, 0, 1],
            "final_energy": [1.0, 2.0, 6.6e-13, 6.2e-13],
            "final_at_floor": [False, False, True, True],
        }
    )
    row = energy_table(summary, 2).iloc[0]
    assert row["400 layers"].endswith("(at the float floor)") and "floor" not in row["2 layers"]
    summary.loc[3, "final_at_floor"] = False
    assert energy_table(summary, 2).iloc[0]["400 layers"].endswith("(1 of 2 at the float floor)")


def test_an_interval_narrower_than_its_digits_gets_the_digits_that_tell_its_ends_apart():
    """A noise-free power law's exponent read ``k^-1.00 (95% interval -1.00 to -1.00)``: an
    interval that said nothing of its width.  The ends (and the exponent) get more digits."""
    import numpy as np
    import pandas as pd

    from oversmooth import verdict
    from oversmooth.report.prose import _change_text, separating, span_text, verdict_text

    assert span_text((-1.0017, -0.9993), ".2f") == "-1.002 to -0.999"
    assert span_text((5.5412, 5.5433)) == "5.541-5.543"
    assert span_text((5.4, 5.6)) == "5.4-5.6" and span_text((3.0, 3.0)) == "3 at both ends"
    assert separating(1.0, 1.0 + 1e-12, ".2f") == ".2f"  # equal to rounding: no digits added
    ev = {"change_decades": 0.011, "window": [1, 64], "level": 0.99}
    ev["change_interval"] = [0.0104, 0.0117]
    assert "(99% interval +0.010 to +0.012)" in _change_text(ev)
    rng = np.random.default_rng(0)
    layers = np.arange(257)
    frame = pd.DataFrame(
        {
            "seed": np.repeat(np.arange(5), 257),
            "layer": np.tile(layers, 5),
            "laplacian_energy": np.tile(1.0 / (1.0 + layers / 2.0), 5)
            * np.exp(0.01 * rng.standard_normal(5 * 257)),
        }
    )
    text = verdict_text(verdict(frame, dtype="float64"))
    assert "decays like k^-1.000 " in text and "(95% interval -1.002 to -0.999)" in text, text


def test_an_open_law_names_the_exponential_factor_on_the_curves_own_side():
    """The Post-LN main command said "an exponential factor halving or doubling every 2.53
    layers cannot be ruled out": 2.53 was the doubling end of beta's interval (-0.129 to
    +0.274) on a decaying curve, read as halving, which beta ruled out faster than every 5.37."""
    from oversmooth.report.prose import fastest_exponential

    ev = {"beta_interval": [-0.129, 0.274]}
    assert fastest_exponential(ev, "decay") == (0.129, False)
    assert fastest_exponential(ev, "growth") == (0.274, False)
    assert fastest_exponential(ev, None) == (0.274, False)  # said "halving or doubling"
    ev["late_slope_interval"] = [-0.153, -0.029]  # the late rate bounds it where faster
    assert fastest_exponential(ev, "decay") == (0.153, True)


def test_a_limit_still_moving_is_said_by_its_interval_alone():
    """Linear diffusion at depth 1024: "asymptotic halving length 162, interval 72.2 or more",
    where the spectrum halves every 95.5 layers: 162 was the law fitted's beta, from a family
    that misfits a curve still crossing over; the interval held the truth."""
    from oversmooth.report.prose import verdict_text

    found = {
        "label": "exponential-smoothing",
        "reason": "exp-late-rate-holds",
        "trend": "decay",
        "asymptotic": False,
        "rate": {"value": 88.6, "interval": [72.2, 115.0], "window": [769, 1024]},
        "asymptotic_rate": {"value": 162.0, "interval": [72.2, None]},
        "evidence": {"late_drift": 0.0005, "late_window": [769, 1024]},
        "final_energy": 1e-3,
        "seeds": 5,
        "notes": [],
    }
    text = verdict_text(found)
    assert "not yet asymptotic: the local halving length is still rising (asymptotic " in text
    assert "halving length 72.2 or more)" in text and "162" not in text, text


@pytest.mark.parametrize(
    ("trend", "span", "said"),
    [
        ("decay", [-1.75, -1.25], "(99% interval 1.25 to 1.75)"),
        ("decay", [-1.0, 3.0], "(99% interval 0.00 to 1.00)"),  # at most 1 decade of decay
        ("decay", [3.0, -1.0], "(99% interval 0.00 to 1.00)"),  # stored high to low
        ("growth", [-3.0, 1.0], "(99% interval 0.00 to 1.00)"),
        ("growth", [1.25, 1.75], "(99% interval 1.25 to 1.75)"),
    ],
)
def test_an_open_laws_change_is_said_as_sizes_on_the_trends_side(trend, span, said):
    """The sentence says a change's size with its interval on the trend's side, from 0 where
    the interval (an older or hand-made record's) reaches the other side: a decay's [-1, 3]
    was said "0 to 3" and its [3, -1] "1 to 3", which left out its own 0.5 (an audit)."""
    numbers = {**NUMBERS, "change_decades": -0.5 if trend == "decay" else 0.5}
    numbers["change_interval"] = span
    found = Verdict(
        label="inconclusive", reason="laws-overlap", seeds=2, trend=trend, evidence=numbers
    )
    verb = "decays" if trend == "decay" else "grows"
    assert f"energy {verb} by 0.50 decades {said} over layers" in reason_text(found)


def test_an_interval_that_reads_the_same_at_both_ends_or_was_stored_high_to_low():
    """A noise-free curve's interval narrower than four more digits show read "13.9-13.9", as
    if it were two numbers; a stored interval written high to low read "5.65 to 2.62".  And
    the evidence table's cells read their ends without the digits that tell them apart."""
    from oversmooth.report.prose import _interval, ends_text, span_text
    from oversmooth.report.render import evidence_table

    assert span_text((13.86294, 13.86294 + 1e-9)) == "13.9 at both ends"
    assert ends_text(-0.05, -0.05, "+.2f") == "-0.05 at both ends"
    assert span_text((13.86294, 13.86394)) == "13.863-13.864"  # four more digits suffice
    assert _interval([5.65, 2.62], ".2f") == "2.62 to 5.65"
    assert ends_text(2.0, -1.0, "+.2f") == "-1.00 to +2.00"
    record = {
        "label": "exponential-smoothing",
        "evidence": {
            "level": 0.99,
            "change_decades": -4.0,
            "change_interval": [-3.9996, -4.0004],
            "beta": -0.0501,
            "beta_interval": [-0.05007, -0.05012],
        },
    }
    table = evidence_table(record)
    assert table is not None
    cells = dict(zip(table.iloc[:, 0], table.iloc[:, 1], strict=True))
    assert cells["fitted change, decades (99% interval)"] == "-4.00 (-4.0004 to -3.9996)"
    assert cells["beta, 99% interval"] == "-0.05012 to -0.05007"


def test_two_end_layers_left_out_are_said_in_the_plural():
    """ "layer 1 lies 0.62 decades above and layer 24 lies 0.53 decades below ... and is left
    out of the fit" (an audit)."""
    from oversmooth.report.prose import _note_text

    note = {
        "code": "ends",
        "off_layers": [1, 24],
        "off_decades": [0.62, -0.53],
        "typical_decades": 0.05,
        "measured_decades": -3.0,
        "fitted_decades": -2.5,
        "first": 1,
        "last": 24,
    }
    said = _note_text(note)
    assert "layer 24 lies 0.53 decades below a law" in said
    assert "and are left out of the fit: with them the measured" in said
    one = {**note, "off_layers": [1], "off_decades": [0.62]}
    assert "and is left out of the fit: with it the measured" in _note_text(one)


def test_the_energy_table_counts_overflowed_seeds_out_and_says_so():
    """One seed's Inf made the whole cell a dash, hiding the finite seeds and the overflow (an
    audit).  Infs are counted out like NaNs, and named; an empty summary is an empty table."""
    import numpy as np
    import pandas as pd

    from oversmooth.report.prose import energy_table

    rows = [
        {"model": "postln", "dataset": "cora", "depth": depth, "seed": s, "final_energy": v}
        for depth, values in (
            (4, [0.1, 0.2, np.nan]),
            (8, [0.1, np.inf, 0.3]),
            (16, [np.inf] * 3),
            (32, [0.0, 0.1, 0.2]),
            (64, [np.nan, np.nan, np.inf]),
        )
        for s, v in enumerate(values)
    ]
    row = energy_table(pd.DataFrame(rows)).iloc[0]
    assert row["4 layers"] == "0.15 ± 0.071 [0.141] (2 of 3 seeds)"
    assert row["8 layers"] == "0.2 ± 0.14 [0.173] (2 of 3 seeds; 1 overflowed)"
    assert row["16 layers"] == "overflow (3 of 3 seeds)"
    assert row["32 layers"] == "0.1 ± 0.1"  # no geometric mean with a seed at 0
    assert row["64 layers"] == "not finite (3 of 3 seeds)"  # a dash is for no run at all
    assert energy_table(pd.DataFrame(rows).iloc[:0]).empty
