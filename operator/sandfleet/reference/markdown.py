"""The little Markdown the reference pages share: tables whose cells stay on one line."""

from __future__ import annotations

from collections.abc import Sequence


def cell(value: object) -> str:
    """A value as one table cell: one line, pipes escaped, empty as a dash."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text or "-"


def code(value: object) -> str:
    """A value as inline code in a table cell (backticks inside are dropped, not escaped)."""
    text = cell(value).replace("`", "")
    return f"`{text}`" if text != "-" else "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A pipe table; the cells must already be one line each (`cell`, `code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


GENERATED_NOTE = (
    '!!! note "Generated"\n    This page is generated from {source} when the site is built: '
    "it cannot fall behind the code."
)
"""An admonition every reference page starts with; format it with source=..."""
