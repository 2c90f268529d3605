"""The Details panel: everything known about the selected slice, and what it relates to.

Related events are read from the trace's own tables — ``flows`` (launch ↔ device op, forward
↔ backward, explicit flows), the ``parent`` column — and, when the dependency graph of
:mod:`explorer.analysis.dependency_graph` has been computed, its neighbours. The same list
drives the arrows on the timeline (:func:`related_events`).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
from PyQt6.QtCore import Qt, QUrl, pyqtSignal, pyqtSlot
from PyQt6.QtGui import QFont, QFontMetrics, QResizeEvent
from PyQt6.QtWidgets import QLabel, QTextBrowser, QVBoxLayout, QWidget

from explorer.analysis.dependency_graph import DependencyGraph
from explorer.trace.model import TraceData
from explorer.trace_api import Trace, model_of
from explorer.units import fmt_ns

MAX_RELATED = 40
LINK_CHARS = 80  # a related event's name in a link, cut at the end (its own title is whole)
_ARG_ORDER = ("Input Dims", "Input type", "bytes", "stream", "device", "correlation", "External id")


def related_events(
    trace: TraceData, slice_id: int, graph: DependencyGraph | None = None
) -> list[tuple[int, int, str]]:
    """``(src, dst, relation)`` for every event directly related to ``slice_id``: flows of
    every type (``launch``, ``fwdbwd``, ``other``) and dependency-graph edges."""
    out: list[tuple[int, int, str]] = []
    flows = trace.flows
    if len(flows):
        src = flows["src"].to_numpy()
        dst = flows["dst"].to_numpy()
        hit = np.flatnonzero((src == slice_id) | (dst == slice_id))[:MAX_RELATED]
        types = flows["type"].iloc[hit].astype(str).to_numpy()
        out += [(int(src[k]), int(dst[k]), str(t)) for k, t in zip(hit, types, strict=True)]
    if graph is not None:
        seen = {(a, b) for a, b, _ in out}
        edges = graph.edges_of(int(slice_id))
        # Nesting is already visible (and listed as the parent): keep the other edges.
        edges = edges[edges["type"].astype(str) != "nest"]
        for row in edges.head(MAX_RELATED).itertuples(index=False):
            pair = (int(row.src), int(row.dst))
            if pair not in seen and pair[0] != pair[1]:
                out.append((pair[0], pair[1], f"depends ({row.type})"))
                seen.add(pair)
    return out


def _before_capture(trace: TraceData, i: int) -> bool:
    """Is slice ``i`` device work launched before the capture (no step's)? Read once the
    launches are known (the analyses find them off the UI thread), so a click never waits."""
    from explorer.analysis.attribution import launched_before_capture

    if trace.memo.peek("launcher") is None:
        return False

    return bool(launched_before_capture(trace)[i])


def _fmt_arg(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 300 else text[:300] + "…"


class DetailsPanel(QWidget):
    """Name, kind, times, args, user source line and related events of one slice.

    Links: a related event selects it (``slice_requested``), the source line opens it in
    the Source panel (``source_requested``); ``slices_selected`` follows the panel contract.
    """

    slices_selected = pyqtSignal(object)
    range_requested = pyqtSignal(int, int)
    slice_requested = pyqtSignal(int)
    source_requested = pyqtSignal(str, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: Trace | TraceData | None = None  # as given: the window's Trace, or a model
        self.graph: DependencyGraph | None = None
        self.slice_id = -1
        self.related: list[tuple[int, int, str]] = []
        self.sources: pd.DataFrame | None = None  # slice_sources() by slice id, once computed
        # The name on one line, elided at the end (a C++ kernel name runs to hundreds of
        # characters without a space); the whole name is its tooltip.
        self.title = QLabel(self)
        self.title.setObjectName("details_title")
        bold = QFont(self.title.font())
        bold.setBold(True)
        bold.setPointSizeF(bold.pointSizeF() * 1.15)
        self.title.setFont(bold)
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.title.setContentsMargins(6, 4, 6, 2)
        self.title.setMinimumWidth(40)
        self.full_name = ""
        self.browser = QTextBrowser(self)
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._link)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.title)
        layout.addWidget(self.browser, 1)
        self._empty()

    @property
    def model(self) -> TraceData:
        """The shown trace's model (a slice is only shown with a trace)."""
        assert self.trace is not None, "no trace shown"
        return model_of(self.trace)

    def set_trace(self, trace: Trace | TraceData | None) -> None:
        self.trace = trace
        self.graph = None
        self.sources = None
        self.slice_id = -1
        self._empty()

    def set_sources(self, sources: pd.DataFrame) -> None:
        """Each slice's user line (:func:`explorer.analysis.attribution.slice_sources`),
        computed in the background; the shown slice gets its line now."""
        self.sources = sources
        if self.slice_id >= 0:
            self.on_selection(self.slice_id)

    def set_dependency_graph(self, graph: DependencyGraph) -> None:
        """The graph computed in the background; neighbours appear from the next selection."""
        self.graph = graph
        if self.slice_id >= 0:
            self.on_selection(self.slice_id)

    def _empty(self) -> None:
        self.related = []
        self._set_title("")
        self.browser.setHtml("<p style='color:#5c6670'>Click an event on the timeline.</p>")

    def _set_title(self, name: str) -> None:
        self.full_name = name
        self.title.setVisible(bool(name))
        self.title.setToolTip(name)
        self._elide_title()

    def _elide_title(self) -> None:
        room = max(self.width() - 14, 20)
        # The metrics of the label's own font, built here: PyQt6 6.11's ``QLabel.fontMetrics()``
        # once raised "QFontMetrics(...): not enough arguments" in CI while the window was
        # being built (not reproduced since; the explicit constructor is the same answer).
        metrics = QFontMetrics(self.title.font())
        self.title.setText(metrics.elidedText(self.full_name, Qt.TextElideMode.ElideRight, room))

    def resizeEvent(self, event: QResizeEvent | None) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self._elide_title()

    def text(self) -> str:
        """What the panel shows, as plain text (for tests and copy-paste); the name whole."""
        return (self.full_name + "\n" if self.full_name else "") + self.browser.toPlainText()

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        self.slice_id = int(slice_id)
        if self.trace is None or slice_id < 0 or slice_id >= len(self.trace):
            self._empty()
            return
        self.related = related_events(model_of(self.trace), slice_id, self.graph)
        self._set_title(str(self.trace.slices["name"].iat[slice_id]))
        self.browser.setHtml(self._html(slice_id))

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """The details follow the selection only."""

    def _html(self, i: int) -> str:
        out = ["<table cellspacing=0 cellpadding=2>"]
        out += [
            f"<tr><td style='color:#5c6670'>{k}</td><td>{v}</td></tr>" for k, v in self._fields(i)
        ]
        out.append("</table>")
        out += self._source_html(i)
        out += self._relations_html(i)
        out += self._args_html(i)
        return "".join(out)

    def _fields(self, i: int) -> list[tuple[str, str]]:
        """The slice's own columns as (label, HTML) rows: kind, times, track, depth, and
        the ids, bytes and memory kinds it has."""
        t = self.model
        s = t.slices
        esc = html.escape
        ts, dur = int(s["ts"].iat[i]), int(s["dur"].iat[i])
        track = int(s["track"].iat[i])
        track_label = str(t.tracks["label"].iat[track]) if track < len(t.tracks) else str(track)
        rows = [
            (
                "kind",
                f"{s['kind'].iat[i]} <span style='color:#5c6670'>({esc(str(s['cat'].iat[i]))})</span>",
            ),
            ("start", esc(fmt_ns(ts))),
            ("duration", f"<b>{esc(fmt_ns(dur))}</b>"),
            ("end", esc(fmt_ns(ts + dur))),
            ("track", esc(track_label)),
            ("depth", str(int(s["depth"].iat[i]))),
        ]
        for col in ("correlation", "external_id", "stream", "device", "bytes", "seq"):
            v = int(s[col].iat[i])
            if v >= 0:
                rows.append((col.replace("_", " "), f"{v:,}" if col == "bytes" else str(v)))
        for col in ("copy_kind", "src_mem", "dst_mem"):
            text = str(s[col].iat[i])
            if text:
                rows.append((col.replace("_", " "), esc(text)))
        if _before_capture(t, i):
            rows.append(("launch", "launched before the capture: in no step"))
        return rows

    def _source_html(self, i: int) -> list[str]:
        """The user line responsible for the slice (a link that opens it), once known."""
        esc = html.escape
        if self.sources is None:
            return ["<p style='color:#5c6670'><b>Source</b>: finding the line…</p>"]
        # Rows by slice id: every slice's, or under a memory limit only the analysed
        # steps' (indexed by their ids; -1 for a slice outside them).
        row = int(self.sources.index.get_indexer([i])[0])
        if row >= 0 and str(self.sources["file"].iat[row]):
            f, line = str(self.sources["file"].iat[row]), int(self.sources["line"].iat[row])
            fn = str(self.sources["function"].iat[row])
            return [
                f"<p><b>Source</b>: <a href='source:{line}:{esc(f)}'>{esc(f)}:{line}</a>"
                f" in <code>{esc(fn)}</code></p>"
            ]
        return []

    def _relations_html(self, i: int) -> list[str]:
        """Links to the parent and to the related events (launches, flows, edges)."""
        out = []
        parent = int(self.model.slices["parent"].iat[i])
        if parent >= 0:
            out.append(f"<p><b>Parent</b>: {self._link_to(parent)}</p>")
        if self.related:
            out.append("<p><b>Related</b></p><ul style='margin-top:0'>")
            for a, b, rel in self.related:
                other = b if a == i else a
                arrow = "→" if a == i else "←"
                out.append(f"<li>{html.escape(rel)} {arrow} {self._link_to(other)}</li>")
            out.append("</ul>")
        return out

    def _args_html(self, i: int) -> list[str]:
        """The slice's args, the usual ones first."""
        args = self.model.args(i)
        if not args:
            return []
        esc = html.escape
        keys = [k for k in _ARG_ORDER if k in args] + sorted(k for k in args if k not in _ARG_ORDER)
        out = ["<p><b>Args</b></p><table cellspacing=0 cellpadding=2>"]
        for k in keys:
            out.append(
                f"<tr><td style='color:#5c6670'>{esc(str(k))}</td>"
                f"<td><code>{esc(_fmt_arg(args[k]))}</code></td></tr>"
            )
        out.append("</table>")
        return out

    def _link_to(self, j: int) -> str:
        s = self.model.slices
        full = str(s["name"].iat[j])
        name = html.escape(full if len(full) <= LINK_CHARS else full[: LINK_CHARS - 1] + "…")
        return (
            f"<a href='slice:{j}'>{name}</a> <span style='color:#5c6670'>"
            f"({s['kind'].iat[j]}, {html.escape(fmt_ns(int(s['dur'].iat[j])))})</span>"
        )

    def _link(self, url: QUrl) -> None:
        text = url.toString()
        if text.startswith("slice:"):
            sid = int(text.split(":", 1)[1])
            self.slice_requested.emit(sid)
        elif text.startswith("source:"):
            _, line, path = text.split(":", 2)
            self.source_requested.emit(path, int(line))
