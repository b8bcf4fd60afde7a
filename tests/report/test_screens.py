"""Every report kind reads on a phone and on a desktop: rendered in headless Chromium at 390
and 1280 CSS px, no element reaches past the right edge of the screen unless it sits in a frame
that scrolls sideways and says so ("scroll sideways" cue), no figure starts off-screen, the
first column of a scrolled table stays in place, and a click on a figure scaled to the column
shows it at full size.

Skipped where no Chromium is installed (``apt-get install chromium``).  With
``OVERSMOOTH_SCREENSHOTS=DIR`` the test also saves a screenshot of each page at both widths into
DIR (never into the repository), to look at.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oversmooth.cli.main import app

BROWSER = next(
    (
        found
        for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
        if (found := shutil.which(name))
    ),
    None,
)
WIDTHS = (390, 1280)
REPO = Path(__file__).resolve().parents[2]

# Runs in the report's own page once its script has marked the frames (load, then a task), and
# posts what it found to the page that holds it.
MEASURE = """
<script>addEventListener('load', function () { setTimeout(function () {
  var vw = document.documentElement.clientWidth, bad = [];
  function name(e) {
    var text = (e.getAttribute('alt') || e.textContent || '').trim().slice(0, 50);
    return e.tagName.toLowerCase() + '.' + String(e.className).split(' ').join('.') + ' "' +
      text + '"';
  }
  function frame(e) {
    for (var a = e.parentElement; a && a !== document.body; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible') return a;
    return null;
  }
  function cued(s) {
    var w = s.parentElement;
    return !!w && w.classList.contains('overflows') &&
      getComputedStyle(w, '::before').content.indexOf('scroll') >= 0;
  }
  function offScreen() {
    var all = document.body.querySelectorAll('*');
    for (var i = 0; i < all.length; i++) {
      var e = all[i], r = e.getBoundingClientRect();
      if (!r.width || (r.right <= vw + 0.5 && r.left >= -0.5)) continue;
      var f = frame(e);
      if (!f) bad.push('off-screen: ' + name(e) + ' reaches ' + Math.round(r.right));
      else if (!cued(f)) bad.push('in a frame with no cue: ' + name(e));
    }
  }
  offScreen();
  document.querySelectorAll('.wide.overflows > .scroll').forEach(function (s) {
    var cell = s.querySelector('tr > :first-child');
    if (!cell) return;
    var before = cell.getBoundingClientRect().left;
    s.scrollLeft = s.scrollWidth;
    if (Math.abs(cell.getBoundingClientRect().left - before) > 1)
      bad.push('first column scrolls away: ' + name(cell));
    s.scrollLeft = 0;
  });
  var images = Array.prototype.map.call(document.querySelectorAll('.figure img'), function (i) {
    var r = i.getBoundingClientRect();
    return {left: r.left, right: r.right, shown: r.width, natural: +i.dataset.width};
  });
  var zoom = null, shrunk = document.querySelector('.figure.shrunk img');
  if (shrunk) {
    shrunk.click();
    var fig = shrunk.closest('.figure'), wide = fig.querySelector('.wide');
    zoom = {full: fig.classList.contains('full'), shown: shrunk.getBoundingClientRect().width,
            natural: +shrunk.dataset.width, cued: cued(wide.firstElementChild)};
    offScreen();
    shrunk.click();
    zoom.back = !fig.classList.contains('full');
  }
  parent.postMessage({id: document.documentElement.dataset.measure, viewport: vw,
    page: document.documentElement.scrollWidth, bad: bad, images: images, zoom: zoom,
    frames: document.querySelectorAll('.wide.overflows').length}, '*');
}, 0); });</script>
"""

HOLDER = """<!DOCTYPE html><html><body style="margin:0">{frames}
<pre id="measured"></pre><script>
var got = {{}};
addEventListener('message', function (e) {{
  got[e.data.id] = e.data;
  document.getElementById('measured').textContent = JSON.stringify(got);
}});
</script></body></html>"""


def measure(page: Path, widths: tuple[int, ...] = WIDTHS) -> dict[int, dict]:
    """Open ``page`` at each width (an iframe of that width each, in one Chromium run) and
    return what :data:`MEASURE` found, by width."""
    frames = []
    for width in widths:
        copy = page.with_name(f".measure-{width}.html")
        text = page.read_text(encoding="utf-8").replace("<html", f'<html data-measure="{width}"', 1)
        copy.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        frames.append(
            f'<iframe src="{copy.name}" style="width:{width}px;height:900px;border:0"></iframe>'
        )
    holder = page.with_name(".measure.html")
    holder.write_text(HOLDER.format(frames="".join(frames)), encoding="utf-8")
    dom = _chromium(holder, max(widths) + 20, "--dump-dom", "--virtual-time-budget=10000")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), f"no measurement came back from Chromium:\n{dom[-2000:]}"
    return {int(k): v for k, v in json.loads(html.unescape(found.group(1))).items()}


def _chromium(page: Path, width: int, *args: str, height: int = 900) -> str:
    result = subprocess.run(
        [
            str(BROWSER),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            *args,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return result.stdout


def _screenshots(page: Path, kind: str) -> None:
    folder = os.environ.get("OVERSMOOTH_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        shot = Path(folder).resolve() / f"{kind}-{width}.png"
        _chromium(page, width, f"--screenshot={shot}", height=6000)


# ----------------------------------------------------------------------------- the reports

runner = CliRunner()


def _cli(*args: object) -> None:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


def _analyze(out: Path) -> Path:
    _cli("analyze", "--model", "postln", "--depth", 16, "--seeds", "0,1", "--out", out, "--quiet")
    return out


def _prune(out: Path) -> Path:
    _cli("prune", "--depth", 8, "--seed", 0, "--prune-layers", "2,4", "--out", out, "--quiet")
    return out


def _compare(out: Path) -> Path:
    _cli(
        "compare",
        "--models",
        "preln,postln,nonlocal",
        "--depths",
        "2,4,8",
        "--seeds",
        "0,1",
        "--out",
        out,
        "--quiet",
    )
    return out


def _train(out: Path, depth: int = 2) -> Path:
    _cli("train", "--depth", depth, "--epochs", 3, "--out", out, "--quiet")
    return out


def _trained(out: Path) -> Path:
    run = _train(out.with_name(out.name + "-run"))
    _cli("analyze", "--checkpoint", run / "best.pt", "--prune-layers", "1,2", "--out", out)
    return out


def _bench(out: Path) -> Path:
    """The committed benchmark results, rendered by the current code."""
    from oversmooth.report.writers import write_bench_report

    out.mkdir()
    results = json.loads((REPO / "reports" / "benchmarks" / "results.json").read_text())
    return write_bench_report(out, results)


def _notebook(out: Path) -> Path:
    import oversmooth
    from oversmooth.data import load
    from torch_geometric.nn.models import GCN

    import torch

    data = load("cora")
    torch.manual_seed(0)
    model = GCN(data.num_features, 16, num_layers=6, out_channels=7).eval()
    with oversmooth.Probe(model, data, similarity=True) as probe, torch.no_grad():
        model(data.x, data.edge_index)
    return oversmooth.write_report(probe, out, title="PyG GCN, 6 layers")


def _sweep(out: Path) -> Path:
    from oversmooth.experiments.sweep import SweepSpec, run_sweep

    spec = SweepSpec(models=("preln", "postln"), depths=(2, 4), seeds=(0,), hidden=16, heads=2)
    run_sweep(spec, out)
    return next(out.glob("report-*"))


def _reproduce(out: Path) -> Path:
    import oversmooth.experiments.ablation as A
    import oversmooth.experiments.reproduce as R

    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(R, "DEPTHS", (2, 4))
        patch.setattr(A, "DEPTHS", (2, 32))
        patch.setattr(A, "ABLATIONS", (A.BASELINE, *(a for a in A.ABLATIONS if a.name == "no-ffn")))
        run = _train(out.with_name(out.name + "-run"), depth=8)
        config = R.ReproduceConfig(
            quick=True,
            seeds=(0,),
            datasets=("cora",),
            train_depth=2,
            train_epochs=2,
            trained=(str(run),),
        )
        return R.run_reproduction(config, out)
    finally:
        patch.undo()


def _atlas(out: Path) -> Path:
    """The committed atlas (fifteen architectures, a fourteen-column table), rendered by the
    current code from its files."""
    from oversmooth.experiments.atlas import render_atlas

    shutil.copytree(REPO / "reports" / "atlas", out)
    return render_atlas(out)


def _wide_document(out: Path) -> Path:
    """The builder alone: a figure twice a phone's width and a table of twelve columns."""
    import pandas as pd

    from oversmooth.report import plots
    from oversmooth.report.document import Document

    doc = Document("oversmooth test: a wide figure and a wide table")
    fig = plots.figure(12, 3.6)  # 1152 CSS px
    fig.add_subplot().plot([1, 2], [3, 4])
    doc.figure(fig, "a wide figure", "wide.png")
    doc.table(pd.DataFrame({f"column {i}": [1.0 / (i + 1), 2.0] for i in range(12)}))
    doc.code("oversmooth analyze " + " ".join(f"--option-{i} value" for i in range(12)))
    out.mkdir()
    return doc.write(out)


KINDS: dict[str, Callable[[Path], Path]] = {
    "document": _wide_document,
    "analyze": _analyze,
    "prune": _prune,
    "compare": _compare,
    "train": _train,
    "analyze-trained": _trained,
    "bench": _bench,
    "write_report": _notebook,
    "sweep": _sweep,
    "reproduce": _reproduce,
    "atlas": _atlas,
}
SLOW = {"sweep", "reproduce"}  # about 10 s and a minute on 2 busy cores


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed")
@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in KINDS]
)
def test_report_fits_every_screen(kind, tmp_path):
    page = KINDS[kind](tmp_path / kind) / "report.html"
    found = measure(page)
    _screenshots(page, kind)
    for width in WIDTHS:
        got = found[width]
        assert got["viewport"] == width, got
        assert got["page"] <= width, f"{kind} at {width} px scrolls sideways: {got['page']} px"
        assert not got["bad"], f"{kind} at {width} px: " + "\n".join(got["bad"])
        for image in got["images"]:  # every figure starts and ends on screen
            assert image["left"] >= 0 and image["right"] <= width, (kind, width, image)
        zoom = got["zoom"]
        if zoom is not None:  # a figure scaled to the column opens at full size and back
            assert zoom["full"] and zoom["back"] and zoom["cued"], (kind, width, zoom)
            assert zoom["shown"] == pytest.approx(zoom["natural"], abs=1), zoom
    if kind == "document":  # the wide figure is scaled on a phone, and shown whole on a desktop
        assert found[390]["zoom"] is not None and found[390]["frames"] >= 1
        assert found[390]["images"][0]["shown"] < 390


def test_every_report_kind_is_measured():
    """A new report (titled ``"oversmooth NAME: ..."`` anywhere in the package, as every
    report is) needs its builder in KINDS, so that it is measured on both screens too."""
    import oversmooth

    package = Path(oversmooth.__file__).resolve().parent
    titled = {
        m.group(1)
        for path in package.rglob("*.py")
        for m in re.finditer(r'"oversmooth[ .](\w+): ', path.read_text(encoding="utf-8"))
    }
    assert titled >= {"train", "bench", "reproduce", "compare", "sweep", "write_report", "atlas"}, (
        titled
    )
    assert titled <= set(KINDS), f"report kinds without a builder in KINDS: {titled - set(KINDS)}"
