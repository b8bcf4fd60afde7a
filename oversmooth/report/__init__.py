"""Figures and reports.  Only :mod:`oversmooth.report.render` creates figures
(matplotlib ``Figure`` objects, never pyplot), saves and releases them."""

from oversmooth.report.render import render_report, write_analysis, write_comparison

__all__ = ["render_report", "write_analysis", "write_comparison"]
