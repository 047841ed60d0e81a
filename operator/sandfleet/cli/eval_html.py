"""`sandfleet eval`'s report.html and the run page of every sample it links to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandfleet.eval.records import SampleRecord
from sandfleet.eval.report import summaries
from sandfleet.logs import get_logger
from sandfleet.report.eval_page import eval_page
from sandfleet.report.html import relative_href, write_run_page

log = get_logger(__name__)

REPORT_HTML = "report.html"


def write_html_report(
    out: Path, records: Sequence[SampleRecord], *, config: Mapping[str, Any], missing: int = 0
) -> Path | None:
    """Write <out>/report.html and the samples' run pages; None (logged) if it could not be
    written: the results and report.md stand without it (blocking)."""
    report = out / REPORT_HTML
    try:
        links = _run_pages(records, report)
        page = eval_page(records, summaries(records), config=config, links=links, missing=missing)
        report.write_text(page, encoding="utf-8")
    except (OSError, ValueError) as error:
        log.warning("report_html_not_written", path=str(report), error=str(error))
        return None
    return report


def _run_pages(records: Sequence[SampleRecord], report: Path) -> dict[tuple[str, str, int], str]:
    """Each sample's run page beside its trajectory, by sample key, linked from the report."""
    links: dict[tuple[str, str, int], str] = {}
    for record in records:
        if not record.trajectory:
            continue
        trajectory = Path(record.trajectory)
        if not trajectory.is_absolute() and not trajectory.is_file():
            trajectory = report.parent / trajectory
        if not trajectory.is_file():
            continue
        page = write_run_page(trajectory, back_to=report, back_label="eval report")
        links[record.key] = relative_href(page, report.parent)
    return links
