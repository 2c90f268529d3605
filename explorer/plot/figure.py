"""The figure type every plot returns, and its inline SVG for HTML displays.

:class:`Figure` is matplotlib's, drawn without pyplot (no global figure registry, no
backend to choose: a figure made in a loop is freed like any object) and with a
``_repr_png_``, so Jupyter shows it inline whether or not the inline backend is active.
"""

from __future__ import annotations

import base64
import io

import matplotlib
from matplotlib.figure import Figure as _MplFigure


class Figure(_MplFigure):
    """A matplotlib figure that displays itself in a notebook."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` × ``height`` inches with constrained layout (labels never
    clipped)."""
    return Figure(figsize=(width, height), layout="constrained")


def figure_svg(fig: _MplFigure) -> str:
    """``fig`` as an inline ``<svg>`` element: no XML prologue, nothing fetched."""
    buf = io.StringIO()
    # Text stays text (searchable, small); ids are stable from run to run.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "explorer"}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg") :].strip()


#: An inline SVG larger than this (a bar per step over thousands of steps) is embedded as
#: a PNG instead: a notebook page stays light and the picture is the same.
MAX_SVG_CHARS = 400_000


def figure_html(fig: Figure) -> str:
    """``fig`` inline in HTML: its SVG (text stays text), or a PNG data URI when the SVG
    would exceed :data:`MAX_SVG_CHARS`. Nothing to fetch either way."""
    svg = figure_svg(fig)
    if len(svg) <= MAX_SVG_CHARS:
        return svg
    png = base64.b64encode(fig._repr_png_()).decode("ascii")
    return f"<img alt='chart' src='data:image/png;base64,{png}'>"


def time_unit(ns: float) -> tuple[float, str]:
    """The scale and unit an axis of durations up to ``ns`` reads in (``3.5 s``, not
    ``3500 ms``): the largest unit of which the maximum is at least 1."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return scale, unit
    return 1.0, "ns"


def byte_unit(n: float) -> tuple[float, str]:
    """The scale and unit an axis of byte counts up to ``n`` reads in."""
    for scale, unit in ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB")):
        if abs(n) >= scale:
            return scale, unit
    return 1.0, "B"
