"""Writing a run's files, and rebuilding a report from them, also a folder written with older
column names."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from oversmooth.analysis import AnalysisConfig, run_analysis
from oversmooth.config import ModelConfig
from oversmooth.report.render import render_report, write_analysis, write_matrix_csv


def test_an_old_analyze_folder_rebuilds_with_its_cosine_figure(tmp_path):
    model = ModelConfig("postln", depth=3, hidden=8, heads=1)
    result = run_analysis(AnalysisConfig(model=model, seeds=(0,)))
    folder = write_analysis(result, tmp_path / "run")
    table = pd.read_csv(folder / "metrics.csv")
    assert "mean_cosine_similarity" in table
    # the folder as an older version wrote it: the adjacent cosine was `cosine_prev`
    table.rename(columns={"mean_cosine_similarity": "cosine_prev"}).to_csv(
        folder / "metrics.csv", index=False
    )
    (folder / "cosine.png").unlink()
    render_report(folder)
    assert (folder / "cosine.png").stat().st_size > 0
    assert "cosine.png" in (folder / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "matrix",
    [
        np.random.default_rng(0).standard_normal((40, 40))
        * 10.0 ** np.random.default_rng(1).integers(-30, 30, (40, 40)),
        np.eye(3),
        np.array([[1e-300, -0.0], [5e15, 123456789.123]]),
        np.array([[np.nan, 1.0], [np.inf, 3.0]]),  # pandas' spelling of NaN and inf
    ],
)
def test_matrix_csv_is_the_file_pandas_writes(tmp_path, matrix):
    labels = [2 * k for k in range(len(matrix))]
    frame = pd.DataFrame(matrix, index=labels, columns=labels)
    frame.to_csv(tmp_path / "pandas.csv", index_label="layer", float_format="%.10g")
    write_matrix_csv(tmp_path / "fast.csv", matrix, labels, "layer")
    assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
    back = pd.read_csv(tmp_path / "fast.csv", index_col=0)
    assert [int(c) for c in back.columns] == labels


def test_per_seed_curves_carry_their_median_of_the_drawn_quantity():
    """Five seeds' |R| and cosine curves cross into a tangle at depth 256: they are drawn thin
    and light under their per-layer median (of |R|, the quantity drawn); one seed is drawn as
    it is."""
    import pandas as pd

    from oversmooth.report.render import _per_seed

    frame = pd.DataFrame(
        {
            "seed": [0, 0, 1, 1, 2, 2],
            "layer": [1, 2, 1, 2, 1, 2],
            "relative_energy": [-0.5, 0.1, 0.2, -0.3, 0.4, 0.2],
        }
    )
    curves = _per_seed(frame, "relative_energy")
    assert [c["label"] for c in curves] == ["seed 0", "seed 1", "seed 2", "median of 3 seeds"]
    assert all(c["alpha"] < 1 for c in curves[:3]) and curves[-1]["color"] == "black"
    assert list(curves[-1]["values"]) == [
        0.4,
        0.2,
    ]  # medians of |R|: {0.5, 0.2, 0.4}, {0.1, 0.3, 0.2}
    one = _per_seed(frame[frame["seed"] == 0], "relative_energy")
    assert [c["label"] for c in one] == ["seed 0"] and "alpha" not in one[0]


def test_captions_name_only_what_is_drawn():
    """The energy caption named "the verdict's fitted law" and "the start of the late window"
    for a curve too short to fit (no law drawn, the lines anchored at the first layer)."""
    from oversmooth.report.render import _anchor_words, _fitted

    short = {"evidence": {"label": "inconclusive", "evidence": {}}}  # a fits.json record
    late = {"fit_curve": [[1, 2], [0.1, 0.01]], "late_window": [9, 16]}
    fitted = {"evidence": {"label": "exponential-smoothing", "evidence": late}}
    assert not _fitted(short) and _anchor_words(short) == "at its first layer"
    assert _fitted(fitted) and _anchor_words(fitted) == "at the start of the late window (layer 9)"


def test_the_law_tables_change_interval_is_the_verdicts():
    """The summary table's "decades (fitted change, 99% interval)" cell printed the late
    slope's interval (the loop reused the name): -12.88 (-0.15 to -0.03) beside a verdict of
    -12.88 (-16.53 to -9.52).  It is the verdict's change interval, to the printed digits."""
    from oversmooth.experiments.calibration import synthetic_frame
    from oversmooth.report.prose import change_interval
    from oversmooth.report.render import law_table
    from oversmooth.verdict import verdict

    found = verdict(synthetic_frame("exponential", -0.1, 0.3, seeds=3, depth=64))
    ev = found.to_dict()["evidence"]
    lo, hi = change_interval(ev)
    assert ev.get("late_slope_interval") is not None  # the name the loop also reads
    table = law_table({"curve": {"evidence": found.to_dict()}})
    cell = table["decades (fitted change, 99% interval)"][0]
    assert cell == f"{ev['change_decades']:+.2f} ({lo:+.2f} to {hi:+.2f})"
    # ends that read the same to 2 decimals get the digits that tell them apart (as the
    # sentence's), and one stored high to low reads low first
    narrow = {"label": "inconclusive", "evidence": {"change_decades": -4.0}}
    narrow["evidence"]["change_interval"] = [-3.9996, -4.0004]
    cell = law_table({"curve": {"evidence": narrow}})["decades (fitted change, 99% interval)"][0]
    assert cell == "-4.00 (-4.0004 to -3.9996)"


def test_the_law_table_names_no_late_rate_without_a_trend():
    """Where the change's interval reaches 0 (no trend), the late rate reads —, as the text
    above the table says: it read "halves every 5.26 layers" beside a verdict that "cannot tell
    a stable curve from a trend" (an audit); with a trend it is given, and a column that reads —
    for every curve is left out."""
    from oversmooth.report.render import law_table

    evidence = {"late_slope": -0.1318, "late_slope_interval": [-0.39, 0.0], "change_decades": -5.4}
    open_record = {"label": "inconclusive", "trend": None, "evidence": evidence}
    table = law_table({"curve": {"evidence": open_record}})
    assert table["late rate"][0] == "—"
    assert "rate (95%)" not in table and "late |R|" not in table
    decided = {**open_record, "trend": "decay"}
    assert table_late(law_table({"curve": {"evidence": decided}})).startswith("halves every 5.26")


def table_late(table):
    return table["late rate"][0]


def test_the_environment_table_says_what_it_does_not_know_and_leaves_out_what_did_not_run(
    tmp_path,
):
    """It showed `git_commit | None` outside a git checkout and `time: prune | 0.00 s` for a run
    that pruned nothing (an audit)."""
    import json

    model = ModelConfig("postln", depth=3, hidden=8, heads=1)
    result = run_analysis(AnalysisConfig(model=model, seeds=(0,)))
    result.environment["git_commit"] = None
    folder = write_analysis(result, tmp_path / "run")
    assert json.loads((folder / "config.json").read_text())["timings"]["prune_s"] == 0.0
    text = (folder / "report.md").read_text(encoding="utf-8")
    assert "| git_commit | not recorded |" in text
    assert "time: prune" not in text and "time: forward" in text


def test_what_a_user_reads_in_tables_and_captions_of_one_seed():
    """Booleans read yes/no (a per-layer excerpt's at_floor read False, a setting True); one
    seed's intervals name no between-seed excess "over 1 seed" (an audit of the pages)."""
    import numpy as np

    from oversmooth.report.document import format_cell
    from oversmooth.report.prose import uncertainty_text

    assert [format_cell(v) for v in (True, False, np.bool_(True), 1, 0.5)] == [
        "yes",
        "no",
        "yes",
        "1",
        "0.5",
    ]
    ev = {"bootstrap_draws": 200, "bootstrap_block": 8}
    one = uncertainty_text({"seeds": 1, "evidence": ev})
    assert one is not None and "between-seed" not in one and "one seed" in one
    assert "between-seed excess over 3 seeds" in str(uncertainty_text({"seeds": 3, "evidence": ev}))


def test_a_compare_caption_anchors_each_theory_line_where_it_is_drawn():
    """The caption named the diffusion anchor curve's layer for the nonlocal bound too, which
    is drawn through each nonlocal curve at that curve's own late window (an audit: layer 44
    said, layer 49 drawn)."""
    import numpy as np

    from oversmooth.report.render import _reference_caption

    grid = np.arange(1, 5)
    references = [
        ("linear diffusion, ×0.3/step", grid, grid),
        ("k⁻¹ bound (Thm 4.1)", grid, grid),
    ]
    record = {"evidence": {"label": "inconclusive", "evidence": {"late_window": [44, 64]}}}
    text = _reference_caption(references, "cora/diffusion", record)
    said = (
        "linear diffusion through the cora/diffusion curve at the start of the late window "
        "(layer 44); the nonlocal bound through each nonlocal curve at the start of that "
        "curve's own late window"
    )
    assert said in text, text


def test_an_asymptotic_rate_bounded_on_one_side_is_its_bound_alone():
    """As the verdict's line says it ("asymptotic doubling length up to 0.555"): the point of a
    one-sided asymptotic interval is the fit's, no limit the layers show (an audit).  A late
    rate keeps its point: it is measured."""
    from oversmooth.report.render import _rate_cell

    one_sided = {"name": "doubling_length", "kind": "asymptotic", "value": 0.4453}
    assert _rate_cell({**one_sided, "interval": [0.0, 0.5547]}) == "up to 0.5547"
    assert _rate_cell({**one_sided, "interval": [0.2, None]}) == "0.2 or more"
    assert _rate_cell({**one_sided, "interval": [0.0, None]}) == "not bounded"
    late = {**one_sided, "kind": "late", "interval": [0.0, 0.5547]}
    assert _rate_cell(late) == "0.4453 (up to 0.5547)"
    assert _rate_cell({**one_sided, "interval": [0.3, 0.5547]}) == "0.4453 (0.3-0.5547)"
