"""Renderers of the job report document: one module per format, one shared section list
(:mod:`explorer.job.render.sections`); JSON is the document itself."""

from __future__ import annotations

import json
from typing import Any

from explorer.job.render import html, markdown, text

FORMATS: tuple[str, ...] = ("text", "markdown", "json", "html")


def render(doc: dict[str, Any], format: str = "text") -> str:
    if format == "json":
        return json.dumps(doc, indent=1) + "\n"
    renderer = {"text": text.render, "markdown": markdown.render, "html": html.render}[format]
    return renderer(doc)
