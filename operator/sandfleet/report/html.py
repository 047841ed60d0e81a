"""Jinja2 renders the pages from the templates beside this module (autoescaped HTML)."""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

import sandfleet
from sandfleet.report.run_view import RunView, read_view

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("sandfleet.report", "templates"),
    autoescape=True,  # every value comes from a model, a tool or a file: never trusted HTML
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    """One line of the runs list."""

    run_id: str
    task_id: str
    when: str | None
    turns: int | None
    status: str | None
    time_s: float | None
    answer: str | None
    href: str | None
    """The run's page, relative to the list page (None: it has no trajectory)."""


def render(template: str, **values: Any) -> str:
    """A template filled in, with the version and the time it was written."""
    written = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = _ENVIRONMENT.get_template(template)
    return page.render(version=sandfleet.__version__, written_at=written, **values)


def run_page(
    view: RunView, *, folder: Path | None, back: str | None = None, back_label: str = "all runs"
) -> str:
    """A run's page; `folder` is where the page goes, to link the files the run produced
    when they were copied back there (output/<name>)."""
    files = []
    for name in view.output_files:
        copied = folder / "output" / name if folder else None
        href = f"output/{name}" if copied is not None and copied.is_file() else None
        files.append((name, href))
    return render(
        "run.html.j2", view=view, result=view.result, files=files, back=back, back_label=back_label
    )


def write_run_page(
    trajectory: Path, *, back_to: Path | None = None, back_label: str = "all runs"
) -> Path:
    """Write the trajectory's page beside it (trajectory.jsonl -> trajectory.html) and
    return its path (blocking). `back_to`: a page (the runs list, the eval report) the run
    page links back to."""
    folder = trajectory.parent
    back = relative_href(back_to, folder) if back_to else None
    target = trajectory.with_suffix(".html")
    page = run_page(read_view(trajectory), folder=folder, back=back, back_label=back_label)
    target.write_text(page, "utf-8")
    return target


def runs_page(rows: Sequence[RunRow], *, where: str) -> str:
    return render("runs.html.j2", rows=rows, where=where)


def relative_href(target: Path, start: Path) -> str:
    """A link from a page in `start` to `target`, relative, so the pages move together."""
    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
