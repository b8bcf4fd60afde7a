"""Every plot function draws on the Axes it is given and returns it (no pyplot involved)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import pandas as pd
from matplotlib.figure import Figure

from oversmooth.report import plots


def _ax():
    return Figure().add_subplot()


def test_plot_functions_draw_and_return_their_axes():
    layers = np.arange(0, 65)
    values = np.exp(-0.1 * layers)
    law = {"layer": [1, 32, 64], "energy": [0.9, 0.04, 0.002]}
    fit = {"evidence": {"label": "exponential-smoothing", "evidence": {"fit_curve": law}}}
    ax = _ax()
    assert (
        plots.energy_curves(
            ax, [{"label": "a", "layers": layers, "values": values, "fit": fit, "floor": 1e-13}]
        )
        is ax
    )
    # the curve and the verdict's law; the float floor lies far below the data and is not drawn
    assert len(ax.lines) == 2 and ax.get_xscale() == "log"
    ax = _ax()
    assert (
        plots.relative_energy_curves(
            ax, [{"label": "a", "layers": layers, "values": np.r_[np.nan, np.diff(values)]}]
        )
        is ax
    )
    ax = _ax()
    assert plots.cosine_curves(ax, [{"label": "a", "layers": layers, "values": np.ones(65)}]) is ax
    ax = _ax()
    assert plots.similarity_heatmap(ax, np.eye(5), range(5), "t") is ax and ax.images
    ax = _ax()
    assert plots.pruning_bars(ax, [2, 4], [0.1, 0.2], "change") is ax and len(ax.patches) == 2
    summary = pd.DataFrame(
        {
            "dataset": "cora",
            "model": ["a", "a", "b", "b"],
            "depth": [2, 4, 2, 4],
            "final_energy": [1, 0.1, 1, 2.0],
        }
    )
    ax = _ax()
    assert plots.final_energy_vs_depth(ax, summary, "cora") is ax and len(ax.lines) == 2
    table = pd.DataFrame(
        {"model": ["a", "a"], "depth": [2, 4], "ours_mean": [1.0, 0.5], "paper": [1.0, 0.1]}
    )
    ax = _ax()
    assert (
        plots.energy_vs_depth_against_reference(ax, table, ["a"], "cora") is ax
        and len(ax.lines) == 2
    )
    assert "matplotlib.pyplot" not in sys.modules


def _draws(ax) -> None:
    """Render the figure: matplotlib's log-scale errors surface only when drawing."""
    import io

    ax.figure.savefig(io.BytesIO(), format="png")


def test_extreme_curves_draw_without_log_scale_errors():
    """Issue 13: zero / non-finite curves made matplotlib raise 'Data cannot be log-scaled'."""
    layers = np.arange(0, 9)
    for values in (np.zeros(9), np.full(9, np.nan), np.r_[np.nan, np.full(8, np.inf)]):
        ax = _ax()
        curve = {"label": "a", "layers": layers, "values": values, "floor": 1e-13}
        plots.energy_curves(ax, [curve])
        _draws(ax)
        assert ax.get_yscale() == "linear" and plots.EMPTY_LOG in [t.get_text() for t in ax.texts]
        ax = _ax()
        plots.relative_energy_curves(ax, [{"label": "a", "layers": layers, "values": values}])
        _draws(ax)
        ax = _ax()
        plots.cosine_curves(ax, [{"label": "a", "layers": layers, "values": values}])
        _draws(ax)
    ax = _ax()
    plots.similarity_heatmap(ax, np.full((3, 3), np.nan), range(3))
    _draws(ax)
    summary = pd.DataFrame(
        {"dataset": "cora", "model": "a", "depth": [2, 4], "final_energy": [0.0, 0.0]}
    )
    ax = _ax()
    plots.final_energy_vs_depth(ax, summary, "cora")
    _draws(ax)


def test_energy_axis_follows_the_data():
    """The y range follows the curve; a float floor far below it is not drawn."""
    layers = np.arange(0, 65)
    values = np.exp(-0.05 * layers)
    ax = _ax()
    plots.energy_curves(ax, [{"label": "a", "layers": layers, "values": values, "floor": 1e-13}])
    low, high = ax.get_ylim()
    assert 1e-3 < low < values.min() and values.max() < high < 10 and len(ax.lines) == 1
    ax = _ax()
    plots.energy_curves(ax, [{"label": "a", "layers": layers, "values": values, "floor": 0.1}])
    assert len(ax.lines) == 2  # the floor inside the range is drawn


def test_local_halving_draws_the_band_and_skips_non_decaying_layers():
    from oversmooth.verdict import local_halving_length

    profile = {
        "layer": [8, 16, 32],
        "slope": [-0.1, -0.05, 0.01],
        "slope_low": [-0.12, -0.07, -0.01],
        "slope_high": [-0.08, -0.03, 0.02],
    }
    local = local_halving_length(profile)
    assert local["halving_length"][2] is None and local["high"][2] is None
    assert local["low"][0] == pytest.approx(np.log(2) / 0.12)
    ax = _ax()
    assert plots.local_halving(ax, [{"label": "a", **local}]) is ax
    assert len(ax.lines) == 1 and ax.collections


def test_similarity_heatmap_draws_each_cell_in_its_own_colour():
    """Every pair of layers is one flat cell, also at ~2.2 pixels a cell (a deep model's
    report): the pixel at a cell's centre has the colormap's colour of an entry, not a blend
    of neighbours (an antialiased resampling fails this)."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rng = np.random.default_rng(0)
    matrix = rng.uniform(-1, 1, (100, 100))
    np.fill_diagonal(matrix, 1.0)
    fig = Figure(figsize=(4, 4), dpi=100)
    ax = fig.add_axes((0.1, 0.1, 0.6, 0.6))  # ~220 px for 100 cells (beside the colorbar)
    plots.similarity_heatmap(ax, matrix, range(100))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    norm = ax.images[0].norm
    s, t = np.meshgrid(np.arange(100), np.arange(100), indexing="ij")
    xy = ax.transData.transform(np.c_[t.ravel(), s.ravel()])  # cell centres, display pixels
    rows = np.floor(pixels.shape[0] - xy[:, 1]).astype(int)
    cols = np.floor(xy[:, 0]).astype(int)
    got = pixels[rows, cols]
    colours = np.round(colormaps["viridis"](norm(matrix))[..., :3] * 255)
    # the image is placed on whole pixels, so a centre pixel may show the next cell: it must
    # show the colour of its cell or of a neighbour, never a mix
    padded = np.pad(colours, ((1, 1), (1, 1), (0, 0)), mode="edge")
    best = np.full(len(got), np.inf)
    for ds in (-1, 0, 1):
        for dt in (-1, 0, 1):
            near = padded[1 + ds : 101 + ds, 1 + dt : 101 + dt].reshape(-1, 3)
            best = np.minimum(best, np.abs(got - near).max(axis=1))
    inner = ((s > 0) & (s < 99) & (t > 0) & (t < 99)).ravel()  # the spines cover the edge cells
    assert best[inner].max() <= 2
    exact = np.abs(got - colours.reshape(-1, 3)).max(axis=1) <= 2
    assert exact[inner].mean() > 0.9


@pytest.mark.parametrize("start,end", [(2, 13), (1, 256), (3, 40), (2, 5)])
@pytest.mark.parametrize("kind", ["energy_curves", "relative_energy_curves", "cosine_curves"])
@pytest.mark.parametrize("width", [4.0, 6.0])
def test_layer_axis_labels_are_integers_that_do_not_overlap(start, end, kind, width):
    """A curve from layer 2 (oversmooth.plot of a frame that starts there) once had its log-axis
    labels 2x10^0, 3x10^0, 4x10^0 run into each other."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plots.figure(width, 3.0)
    layers = np.arange(start, end + 1)
    ax = getattr(plots, kind)(
        fig.add_subplot(), [{"label": "a", "layers": layers, "values": 0.9**layers}]
    )
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    lo, hi = ax.get_xlim()
    labels = [
        t
        for t in ax.get_xticklabels(which="both")
        if t.get_visible() and t.get_text() and lo <= t.get_position()[0] <= hi
    ]
    assert len(labels) >= 2 and all(t.get_text().isdigit() for t in labels), labels
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert left.x1 < right.x0, [t.get_text() for t in labels]


@pytest.mark.parametrize(("decades", "has_minor"), [(13, False), (7, False), (3, True)])
def test_log_axes_drop_minor_ticks_only_over_many_decades(decades, has_minor):
    """A log y axis keeps matplotlib's minor ticks over a few decades; over more than
    MINOR_TICK_DECADES it draws none (a hundred unlabelled ticks cost a third of a report's
    drawing time)."""
    fig = plots.figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [1.0, 10.0**-decades])
    plots.log_y(ax)
    fig.canvas.draw()
    minor = ax.yaxis.get_minorticklocs()
    low, high = ax.get_ylim()
    inside = [v for v in minor if low <= v <= high]
    assert bool(inside) is has_minor
    assert len(ax.yaxis.get_majorticklocs()) > 1


@pytest.mark.parametrize(
    ("label", "plain"),
    [
        (r"$\mathdefault{10^{-12}}$", "10\u207b\u00b9\u00b2"),
        (r"$\mathdefault{10^{0}}$", "10\u2070"),
        (r"$\mathdefault{10^{305}}$", "10\u00b3\u2070\u2075"),
        (r"$\mathdefault{2\times10^{-3}}$", "2\u00d710\u207b\u00b3"),
        (r"$\mathdefault{1}$", "1"),
        (r"$\mathdefault{0.5}$", "0.5"),
        ("", ""),
        (r"$\mathdefault{e^{2}}$", r"$\mathdefault{e^{2}}$"),  # not ours to rewrite
        ("layer $k$", "layer $k$"),
    ],
)
def test_plain_label_rewrites_only_matplotlib_log_labels(label, plain):
    assert plots.plain_label(label) == plain


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1e-16, 1.0, {"10\u207b\u00b9\u2076", "10\u207b\u2078", "10\u2070"}),
        (2e-3, 8e-3, {"2\u00d710\u207b\u00b3", "6\u00d710\u207b\u00b3"}),
    ],
)
def test_log_y_labels_are_plain_text_at_matplotlib_ticks(low, high, expected):
    """log_y keeps matplotlib's log ticks and which of them are labelled (decades, and minor
    ticks on a short axis) but writes the labels without mathtext, whose parsing and layout
    took about a fifth of the time the report's figures took to draw."""
    from matplotlib.ticker import LogFormatterSciNotation

    fig = plots.figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [low, high])
    plots.log_y(ax)
    fig.canvas.draw()
    ours = [t.get_text() for t in ax.get_yticklabels(which="both")]
    assert expected <= set(ours)
    assert not any("$" in text for text in ours)
    # the same ticks labelled as matplotlib's own formatter labels them
    ax.yaxis.set_major_formatter(LogFormatterSciNotation(10.0))
    ax.yaxis.set_minor_formatter(LogFormatterSciNotation(10.0))
    fig.canvas.draw()
    theirs = [t.get_text() for t in ax.get_yticklabels(which="both")]
    assert ours == [plots.plain_label(text) for text in theirs]
    assert sum(bool(t) for t in theirs) == sum(bool(t) for t in ours) >= 2


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (2, 2)])
def test_tight_layout_in_one_pass_gives_matplotlibs_subplot_parameters(shape):
    """plots.figure's tight layout measures the axes once (no rect): on figures of one or more
    axes, with long labels, a legend and a colorbar, the subplot parameters are those of
    matplotlib's default tight layout, which measures twice."""
    from matplotlib.figure import Figure

    def draw(fig: Figure) -> tuple[float, ...]:
        axes = fig.subplots(*shape, squeeze=False).ravel()
        for i, ax in enumerate(axes[:-1]):
            ax.plot([1, 10, 100], [1.0, 1e-6, 1e-13], label=f"curve {i}")
            plots.log_y(ax)
            ax.set_ylabel("a long label " * (i + 1))
            ax.set_xlabel("layer $k$")
            ax.set_title(f"panel {i}")
            ax.legend()
        image = axes[-1].imshow(np.eye(3))
        axes[-1].set_ylabel("layer $s$")
        fig.colorbar(image, ax=axes[-1], label="similarity")
        fig.draw_without_rendering()  # runs the layout
        p = fig.subplotpars
        return (p.left, p.right, p.bottom, p.top, p.wspace, p.hspace)

    fig = plots.figure(8.0, 5.0)
    assert fig.get_layout_engine().get()["rect"] is None
    ours = draw(fig)
    theirs = draw(Figure(figsize=(8.0, 5.0), layout="tight"))
    assert ours == pytest.approx(theirs, rel=0, abs=1e-12)
    assert ours != pytest.approx((0.125, 0.9, 0.11, 0.88, 0.2, 0.2))  # the layout moved them


@pytest.mark.parametrize(("base", "expected"), [(10, "10\u00b3"), (2, "2\u2074")])
def test_log_x_labels_are_plain_text_in_its_base(base, expected):
    fig = plots.figure()
    ax = fig.add_subplot()
    ax.plot([1, 1000], [1.0, 2.0])
    plots.log_x(ax, base)
    labels = [t.get_text() for t in ax.get_xticklabels(which="both")]
    assert expected in labels
    assert not any("$" in text for text in labels)


def test_the_dynamics_heatmap_ticks_only_recorded_epochs():
    """Columns every 3 epochs from 0 drew a tick at -1, an epoch that never ran (an audit)."""
    import numpy as np

    from oversmooth.report import plots

    fig = plots.figure()
    ax = plots.energy_dynamics_heatmap(
        fig.add_subplot(), [0, 3, 6], [0, 1, 2, 3, 4], np.full((5, 3), 0.5)
    )
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert min(ticks) == 0 and max(ticks) <= 6


def test_a_curve_of_one_layer_is_drawn_as_a_point():
    """An audit: a depth-1 run's energy, relative-energy and cosine figures were empty (one
    point per seed, drawn as a line of no length, without markers)."""
    one = {"label": "seed 0", "layers": [0, 1], "values": [2.0, 1.0]}
    two = {"label": "seed 1", "layers": [0, 1, 2], "values": [2.0, 1.0, 0.5]}
    for draw in (plots.energy_curves, plots.relative_energy_curves, plots.cosine_curves):
        ax = _ax()
        draw(ax, [one, two])
        lines = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
        assert [line.get_marker() for line in lines] == ["o", "None"], draw.__name__


def test_pruning_bars_draw_each_drops_interval_as_whiskers():
    ax = _ax()
    plots.pruning_bars(
        ax, [2, 16], [22.7, 0.37], "drop", log=False, interval=([19.9, -0.99], [24.5, 1.55])
    )
    from matplotlib.container import ErrorbarContainer

    (errors,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    whiskers = errors.lines[2][0].get_segments()
    assert [tuple(np.round(s[:, 1], 2)) for s in whiskers] == [(19.9, 24.5), (-0.99, 1.55)]
