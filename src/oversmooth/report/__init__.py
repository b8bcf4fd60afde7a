"""Figures and reports.

:mod:`oversmooth.report.plots` is the one place that draws figures (matplotlib ``Figure``
objects, never pyplot); :class:`~oversmooth.report.document.Document` is the one report
builder (report.md + report.html, figures saved and released); :mod:`.render` writes and
re-renders the analyze/compare/prune/sweep folders, :mod:`.writers` the train, bench and
reproduce reports.
"""

from oversmooth.report.document import Document
from oversmooth.report.render import render_report, write_analysis, write_comparison

__all__ = ["Document", "render_report", "write_analysis", "write_comparison"]
