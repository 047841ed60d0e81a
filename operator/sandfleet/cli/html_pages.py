"""`sandfleet show RUN --html` and `sandfleet runs --html`: the runs as pages on disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sandfleet.report.html import RunRow, relative_href, runs_page, write_run_page
from sandfleet.runs.index import RunEntry

RUNS_PAGE = "index.html"
"""The runs list, in the results folder."""


def show_html(trajectory: Path) -> Path:
    """Write one run's page beside its trajectory; returns the page (blocking)."""
    return write_run_page(trajectory)


def runs_html(runs: Sequence[RunEntry], results_dir: Path) -> Path:
    """Write <results-dir>/index.html and every listed run's page; returns the list (blocking)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    index = results_dir / RUNS_PAGE
    rows = []
    for run in runs:
        href = None
        if run.trajectory.is_file():
            page = write_run_page(run.trajectory, back_to=index)
            href = relative_href(page, results_dir)
        rows.append(_row(run, href))
    index.write_text(runs_page(rows, where=str(results_dir)), "utf-8")
    return index


def _row(run: RunEntry, href: str | None) -> RunRow:
    outcome = run.outcome
    return RunRow(
        run_id=run.run_id,
        task_id=run.task_id,
        when=run.when.strftime("%Y-%m-%d %H:%M:%S") if run.when else None,
        turns=outcome.turns if outcome else None,
        status=outcome.status if outcome else None,
        time_s=outcome.total_time_s if outcome else None,
        answer=outcome.answer if outcome and outcome.answered else None,
        href=href,
    )
