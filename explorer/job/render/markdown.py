"""The job report as Markdown (for a pull request or a wiki page)."""

from __future__ import annotations

from typing import Any

from explorer.job.render.sections import sections, title


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(doc: dict[str, Any]) -> str:
    out = [f"# {title(doc)}"]
    for sec in sections(doc):
        out += ["", f"## {sec.title}", ""]
        out += [f"{line}  " for line in sec.lines]
        if sec.header and sec.rows:
            align = ["---:" if i in sec.numeric else "---" for i in range(len(sec.header))]
            out += ["", "| " + " | ".join(map(_cell, sec.header)) + " |",
                    "|" + "|".join(align) + "|"]  # fmt: skip
            out += ["| " + " | ".join(map(_cell, r)) + " |" for r in sec.rows]
    return "\n".join(out) + "\n"
