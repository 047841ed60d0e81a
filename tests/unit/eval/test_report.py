"""report.md says how the samples stopped (submits without an answer apart), what each
sample answered next to the expected answer, and that a run was partial (issue 27 item 10)."""

from __future__ import annotations

from sandfleet.eval.report import report_markdown
from tests.unit.eval.test_scoring import sample

CONFIG = {"benchmark": "arith", "model": "m", "base_url": "http://x/v1", "samples": 2}


def test_the_report_breaks_samples_down_by_status_and_lists_each_answer() -> None:
    records = [
        sample("p1", 0, 1.0, agent_answer="391", ground_truth="391"),
        sample("p1", 1, 0.0, agent_answer="", ground_truth="391"),
        sample("p2", 0, 0.0, agent_answer="a | b", ground_truth=7, stop_reason="max_turns"),
    ]

    report = report_markdown(records, config=CONFIG)

    assert "Partial run" not in report
    breakdown = report.split("## how samples stopped")[1].split("##")[0]
    assert "| sandbox | `submitted` | 1 |" in breakdown
    assert "| sandbox | `submitted_no_answer` | 1 |" in breakdown
    assert "| sandbox | `max_turns` | 1 |" in breakdown
    answers = report.split("## answers")[1]
    assert "| sandbox | `p1` | 0 | `submitted` | 1 | 391 | 391 |" in answers
    assert "| sandbox | `p1` | 1 | `submitted_no_answer` | 0 | (none) | 391 |" in answers
    assert "| sandbox | `p2` | 0 | `max_turns` | 0 | a \\| b | 7 |" in answers


def test_a_partial_run_says_so_at_the_top() -> None:
    report = report_markdown([sample("p1", 0, 1.0)], config=CONFIG, missing=3)

    first_lines = report.splitlines()[:6]
    assert any(
        line.startswith("**Partial run:** 3 planned sample(s) have no result")
        for line in first_lines
    )
