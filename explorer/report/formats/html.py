"""The HTML format: one self-contained page (inline CSS and SVG; no script, nothing
fetched), for CI artifacts and for printing. Lays out any report document; its charts are
drawn from the numbers the document's charts carry. The one HTML table writer lives here.
"""

from __future__ import annotations

from html import escape

from explorer.report.document import Bar, Chart, Document, Entry, Field, Line, Section, Table

NAME = "html"
ORDER = 3

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:14px 0 4px}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.good td{color:#2e7d32} tr.bad td{color:#c62828} tr:target td{background:#fff3c4}
.alarm{background:#d8342b;color:#fff;padding:10px;font-weight:bold;font-size:16px}
.caution{font-weight:bold;color:#a04a00} .warning{color:#a04a00}
.finding{border-left:4px solid #e08a00;padding:6px 12px;margin:12px 0;background:#fafafa}
.finding.severe{border-left-color:#d8342b}
.finding h3{margin:2px 0;font-size:15px} code{background:#f0f0f0;padding:1px 4px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i,i.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
svg.chart{display:block;max-width:100%;height:auto;margin:6px 0}
.note{color:#666}
@media print{
 body{margin:0;max-width:none;font-size:11px;color:#000}
 h2{break-after:avoid} table,.finding,svg.chart,.legend{break-inside:avoid}
 a{color:inherit;text-decoration:none} tr:target td{background:none}
 .finding{background:none} *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
}
"""


def render(document: Document, color: bool = False) -> str:
    """The document as a standalone HTML page (``color`` is ignored: a page has colour)."""
    body = [_line(h) for h in document.head if h.style == "alarm"]
    subject = f" — <code>{escape(document.subject)}</code>" if document.subject else ""
    body.append(f"<h1>{escape(document.title)}{subject}</h1>")
    body += [_line(h) for h in document.head if h.style != "alarm"]
    for section in document.sections:
        body.append(_section(section))
    body += [_line(h) for h in document.foot]
    title = document.title + (f" — {document.subject}" if document.subject else "")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _line(h: Line) -> str:
    cls = f" class='{h.style}'" if h.style else ""
    tag = "div" if h.style == "alarm" else "p"
    return f"<{tag}{cls}>{escape(h.text)}</{tag}>"


def _section(section: Section) -> str:
    out = [f"<section id='{escape(section.key)}'><h2>{escape(section.title)}</h2>"]
    out += [f"<p>{escape(p)}</p>" for p in section.lead]
    out += [_chart(c) for c in section.charts]
    out += [table(t) for t in section.tables]
    out += [_entry(e) for e in section.entries]
    out += [f"<p class='note'>{escape(n)}</p>" for n in section.notes]
    return "\n".join(out) + "</section>"


def swatch(colour: str) -> str:
    return f"<i class='sw' style='display:inline-block;width:10px;height:10px;background:{colour}'></i>"


def table(t: Table) -> str:
    """``t`` as an HTML table: numbers right-aligned, code as code, row swatches, anchors
    and tones."""

    def cell(i: int, v: str, tag: str = "td", k: int = -1) -> str:
        cls = " class='n'" if i in t.numeric else ""
        text = f"<code>{escape(v)}</code>" if i in t.code and tag == "td" and v else escape(v)
        if k >= 0 and t.colours and i == t.swatch:
            text = swatch(t.colours[k]) + " " + text
        return f"<{tag}{cls}>{text}</{tag}>"

    out = [f"<h3>{escape(t.title)}</h3>"] if t.title else []
    out.append("<table><tr>" + "".join(cell(i, v, "th") for i, v in enumerate(t.header)) + "</tr>")
    for k, r in enumerate(t.rows):
        attrs = f" id='{escape(t.anchors[k])}'" if t.anchors and t.anchors[k] else ""
        tone = t.tones[k] if t.tones else ""
        attrs += f" class='{tone}'" if tone else ""
        out.append(f"<tr{attrs}>" + "".join(cell(i, v, k=k) for i, v in enumerate(r)) + "</tr>")
    return "".join(out) + "</table>"


def _value(f: Field) -> str:
    text = f"<code>{escape(f.value)}</code>" if f.code else escape(f.value)
    return f"<a href='#{escape(f.link)}'>{text}</a>" if f.link else text


def _entry(e: Entry) -> str:
    items = "".join(f"<li><b>{escape(f.label)}:</b> {_value(f)}</li>" for f in e.fields)
    anchor = f" id='{escape(e.anchor)}'" if e.anchor else ""
    cls = "finding severe" if e.severe else "finding"
    return (
        f"<div class='{cls}'{anchor}><h3>{e.number}. <code>{escape(e.kind)}</code> "
        f"{escape(e.title)}</h3><ul>{items}</ul></div>"
    )


def _legend(items: list[tuple[str, str]]) -> str:
    spans = "".join(
        f"<span><i style='background:{colour}'></i>{escape(label)}</span>"
        for label, colour in items
    )
    return f"<div class='legend'>{spans}</div>"


def _svg(kind: str, width: float, height: float, title: str, inner: list[str]) -> str:
    return (
        f"<svg class='chart' data-chart='{kind}' xmlns='http://www.w3.org/2000/svg' "
        f"width='{width:.0f}' height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' "
        f"role='img' aria-label='{escape(title)}'><title>{escape(title)}</title>"
        + "".join(inner)
        + "</svg>"
    )


def _chart(c: Chart) -> str:
    head = f"<h3>{escape(c.title)}</h3>" if c.title else ""
    legend = _legend(c.legend) if c.legend else ""
    if c.kind == "bars":
        return head + legend + _bars(c)
    if c.kind == "composition":
        return head + _composition(c) + legend
    if c.kind == "curve":
        return head + _curve(c) + legend
    if c.kind == "heatmap":
        return head + _heatmap(c) + legend
    raise ValueError(f"no HTML for a chart of kind {c.kind!r}")


def _total(b: Bar) -> float:
    return sum(s.value for s in b.segments)


def _bars(c: Chart) -> str:
    """One stacked bar per :class:`Bar`; its height is its total, segments stacked bottom up."""
    bars = c.bars
    if not bars:
        return ""
    w_bar = max(4, min(28, 880 // len(bars) - 3))
    gap, h, left, bottom, top_pad = max(1, w_bar // 5), 180, 64, 28, 12
    width = left + len(bars) * (w_bar + gap) + 10
    top = max(_total(b) for b in bars) or 1.0
    inner = [
        f"<text x='{left - 8}' y='{top_pad + 4}' font-size='11' text-anchor='end'>{escape(c.y_label)}</text>",
        f"<text x='{left - 8}' y='{top_pad + h}' font-size='11' text-anchor='end'>0</text>",
        f"<line x1='{left - 4}' y1='{top_pad}' x2='{left - 4}' y2='{top_pad + h}' stroke='#999'/>",
        f"<line x1='{left - 4}' y1='{top_pad + h}' x2='{width - 6}' y2='{top_pad + h}' stroke='#999'/>",
    ]  # fmt: skip
    step = max(1, len(bars) // 20)
    for i, b in enumerate(bars):
        x = left + i * (w_bar + gap)
        y = float(top_pad + h)
        for s in b.segments:
            if s.value <= 0:
                continue
            hh = h * s.value / top
            y -= hh
            inner.append(
                f"<rect x='{x}' y='{y:.2f}' width='{w_bar}' height='{hh:.2f}' fill='{s.colour}'>"
                f"<title>{escape(s.tip)}</title></rect>"
            )
        if i % step == 0:
            inner.append(
                f"<text x='{x + w_bar / 2:.1f}' y='{top_pad + h + 16}' font-size='10' "
                f"text-anchor='middle'>{escape(b.label)}</text>"
            )
    return _svg("bars", width, top_pad + h + bottom, c.title, inner)


def _composition(c: Chart) -> str:
    """One bar of the whole, split into its parts (widths in proportion)."""
    if not c.bars:
        return ""
    (b,) = c.bars[:1]
    total = _total(b) or 1.0
    width, h = 900, 28
    inner, x = [], 0.0
    for s in b.segments:
        if s.value <= 0:
            continue
        w = width * s.value / total
        inner.append(
            f"<rect x='{x:.2f}' y='0' width='{w:.2f}' height='{h}' fill='{s.colour}'>"
            f"<title>{escape(s.tip)}</title></rect>"
        )
        x += w
    return _svg("composition", width, h, c.title, inner)


def _curve(c: Chart) -> str:
    """Each series as a polyline over ``xs``, sharing one y axis from 0."""
    xs = c.xs
    if not xs or not c.series:
        return ""
    w, h, left, top_pad = 900, 160, 70, 10
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    top = max([max(s.ys) for s in c.series if s.ys] + [1.0])

    def pts(ys: list[float]) -> str:
        return " ".join(
            f"{left + (w - left) * (x - x0) / span:.1f},{top_pad + h - h * y / top:.1f}"
            for x, y in zip(xs, ys, strict=True)
        )

    inner = [
        f"<text x='{left - 6}' y='{top_pad + 10}' font-size='11' text-anchor='end'>{escape(c.y_label)}</text>",
        f"<text x='{left - 6}' y='{top_pad + h}' font-size='11' text-anchor='end'>0</text>",
        f"<line x1='{left}' y1='{top_pad}' x2='{left}' y2='{top_pad + h}' stroke='#999'/>",
        f"<line x1='{left}' y1='{top_pad + h}' x2='{w}' y2='{top_pad + h}' stroke='#999'/>",
    ]  # fmt: skip
    for s in c.series:
        dash = " stroke-dasharray='4 3'" if s.dashed else " stroke-width='1.5'"
        inner.append(
            f"<polyline fill='none' stroke='{s.colour}'{dash} points='{pts(s.ys)}'>"
            f"<title>{escape(s.label)}</title></polyline>"
        )
    inner += [
        f"<text x='{left}' y='{top_pad + h + 16}' font-size='11'>{escape(c.x_labels[0])}</text>",
        f"<text x='{w}' y='{top_pad + h + 16}' font-size='11' text-anchor='end'>{escape(c.x_labels[1])}</text>",
    ]  # fmt: skip
    return _svg("curve", w + 10, top_pad + h + 24, c.title, inner)


#: The heatmap's shades run from the lightest to this colour (the longest cell).
HEAT = (216, 52, 43)


def _shade(v: float, top: float) -> str:
    """White-ish for 0, :data:`HEAT` for ``top``."""
    f = 0.12 + 0.88 * (v / top if top else 0.0)
    r, g, b = (round(255 + (c - 255) * f) for c in HEAT)
    return f"#{r:02x}{g:02x}{b:02x}"


def _heatmap(c: Chart) -> str:
    """One cell per (row, column), shaded by its value; an empty cell for no value."""
    if not c.grid:
        return ""
    cw, ch, left, top_pad = 56, 20, 110, 18
    cols = max(len(r) for r in c.grid)
    top = max((v for r in c.grid for v in r if v is not None), default=0.0)
    inner = [
        f"<text x='{left + k * cw + cw / 2:.0f}' y='{top_pad - 5}' font-size='10' "
        f"text-anchor='middle'>{escape(label)}</text>"
        for k, label in enumerate(c.column_labels[:cols])
    ]
    for i, row in enumerate(c.grid):
        y = top_pad + i * ch
        label = c.row_labels[i] if i < len(c.row_labels) else ""
        inner.append(
            f"<text x='{left - 6}' y='{y + ch - 6}' font-size='11' text-anchor='end'>"
            f"{escape(label)}</text>"
        )
        for k, v in enumerate(row):
            if v is None:
                continue
            tip = c.grid_tips[i][k] if i < len(c.grid_tips) and k < len(c.grid_tips[i]) else ""
            inner.append(
                f"<rect x='{left + k * cw}' y='{y}' width='{cw - 2}' height='{ch - 2}' "
                f"fill='{_shade(v, top)}'><title>{escape(tip)}</title></rect>"
            )
    return _svg("heatmap", left + cols * cw + 10, top_pad + len(c.grid) * ch + 6, c.title, inner)
