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
from PyQt6.QtCore import QUrl, pyqtSignal, pyqtSlot
from PyQt6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from explorer.trace.model import TraceData
from explorer.units import fmt_ns

MAX_RELATED = 40
_ARG_ORDER = ("Input Dims", "Input type", "bytes", "stream", "device", "correlation", "External id")


def related_events(
    trace: TraceData, slice_id: int, graph: Any = None
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
    if graph is not None and hasattr(graph, "edges_of"):
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
        self.trace: TraceData | None = None
        self.graph: Any = None
        self.slice_id = -1
        self.related: list[tuple[int, int, str]] = []
        self.browser = QTextBrowser(self)
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._link)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.browser)
        self._empty()

    def set_trace(self, trace: TraceData | None) -> None:
        self.trace = trace
        self.graph = None
        self.slice_id = -1
        self._empty()

    def set_dependency_graph(self, graph: Any) -> None:
        """The graph computed in the background; neighbours appear from the next selection."""
        self.graph = graph
        if self.slice_id >= 0:
            self.on_selection(self.slice_id)

    def _empty(self) -> None:
        self.related = []
        self.browser.setHtml("<p style='color:#5c6670'>Click an event on the timeline.</p>")

    def text(self) -> str:
        """What the panel shows, as plain text (for tests and copy-paste)."""
        return self.browser.toPlainText()

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        self.slice_id = int(slice_id)
        if self.trace is None or slice_id < 0 or slice_id >= len(self.trace):
            self._empty()
            return
        self.related = related_events(self.trace, slice_id, self.graph)
        self.browser.setHtml(self._html(slice_id))

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """The details follow the selection only."""

    def _html(self, i: int) -> str:
        t = self.trace
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
            v = str(s[col].iat[i])
            if v:
                rows.append((col.replace("_", " "), esc(v)))
        out = [f"<h3 style='margin:2px 0'>{esc(str(s['name'].iat[i]))}</h3>"]
        out.append("<table cellspacing=0 cellpadding=2>")
        out += [f"<tr><td style='color:#5c6670'>{k}</td><td>{v}</td></tr>" for k, v in rows]
        out.append("</table>")
        frame = self._user_frame(i)
        if frame is not None:
            f, line, fn = frame
            out.append(
                f"<p><b>Source</b>: <a href='source:{line}:{esc(f)}'>{esc(f)}:{line}</a>"
                f" in <code>{esc(fn)}</code></p>"
            )
        parent = int(s["parent"].iat[i])
        if parent >= 0:
            out.append(f"<p><b>Parent</b>: {self._link_to(parent)}</p>")
        if self.related:
            out.append("<p><b>Related</b></p><ul style='margin-top:0'>")
            for a, b, rel in self.related:
                other = b if a == i else a
                arrow = "→" if a == i else "←"
                out.append(f"<li>{esc(rel)} {arrow} {self._link_to(other)}</li>")
            out.append("</ul>")
        args = t.args(i)
        if args:
            keys = [k for k in _ARG_ORDER if k in args] + sorted(
                k for k in args if k not in _ARG_ORDER
            )
            out.append("<p><b>Args</b></p><table cellspacing=0 cellpadding=2>")
            for k in keys:
                out.append(
                    f"<tr><td style='color:#5c6670'>{esc(str(k))}</td>"
                    f"<td><code>{esc(_fmt_arg(args[k]))}</code></td></tr>"
                )
            out.append("</table>")
        return "".join(out)

    def _user_frame(self, i: int) -> tuple[str, int, str] | None:
        """The responsible user line: from :func:`explorer.analysis.attribution.slice_sources`
        once the background analyses have computed it (device ops get their launch's line,
        ops without a stack their caller's), else the slice's own stack."""
        sources = self.trace.memo.peek("slice_sources")
        if sources is not None and i < len(sources):
            path = str(sources["file"].iat[i])
            if path:
                return path, int(sources["line"].iat[i]), str(sources["function"].iat[i])
            return None
        try:
            return self.trace.user_frame(i)
        except (ImportError, AttributeError, KeyError, IndexError):
            return None

    def _link_to(self, j: int) -> str:
        s = self.trace.slices
        name = html.escape(str(s["name"].iat[j]))
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
