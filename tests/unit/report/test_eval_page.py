"""report.html: plots as inline SVG (sandbox vs llm, tokens, times, pass@k) and linked rows."""

from __future__ import annotations

import re

import pytest

from sandfleet.eval.records import SampleRecord
from sandfleet.eval.report import summaries
from sandfleet.report import plots
from sandfleet.report.eval_page import eval_page
from tests.unit.eval.test_scoring import sample

CONFIG = {"benchmark": "bench", "model": "m", "samples": 2, "data": "rows.json"}


def _records() -> list[SampleRecord]:
    timing = {"model_time_s": 1.0, "env_time_s": 0.5, "total_time_s": 2.0}
    tokens = {"prompt_tokens": 300, "completion_tokens": 20, "observation_tokens": 80}
    return [
        sample("a", 0, 1.0, **timing, **tokens, agent_answer="4", trajectory="x"),
        sample("a", 1, 0.0, **timing, **tokens),
        sample("b", 0, 1.0, domain="code", **timing, **tokens),
        sample("b", 1, 1.0, domain="code", **timing, **tokens),
        sample("a", 0, 1.0, mode="llm"),
        sample("a", 1, 0.0, mode="llm"),
        sample("b", 0, 0.0, mode="llm", domain="code"),
        sample("b", 1, 1.0, mode="llm", domain="code"),
    ]


def test_every_plot_is_inline_svg_and_rows_link_to_their_run_pages() -> None:
    records = _records()
    links = {("sandbox", "a", 0): "runs/sandbox/a-0/trajectory.html"}
    page = eval_page(records, summaries(records), config=CONFIG, links=links)
    plots = re.findall(r'<figure class="plot" data-plot="([^"]+)"><svg', page)
    assert plots == [
        "Mean score by domain: sandbox vs llm",
        "Tokens per problem (sandbox mode, mean per sample)",
        "Time per problem (sandbox mode, mean per sample)",
        "pass@k",
    ]
    assert "<?xml" not in page and "<metadata>" not in page
    assert re.search(r'(src|href)="(https?:)?//', page) is None  # nothing to fetch
    assert page.count('<a href="runs/sandbox/a-0/trajectory.html">view</a>') == 1
    assert page.count("<tr><td>") == len(records) + sum(len(g) for g in summaries(records).values())


def test_one_sample_one_mode_has_no_pass_at_k_plot_and_no_time_split_when_unknown() -> None:
    records = [sample("a", 0, 1.0), sample("b", 0, 0.0)]  # no model or tool times
    page = eval_page(records, summaries(records), config=CONFIG, links={})
    assert re.findall(r'data-plot="([^"]+)"', page) == [
        "Mean score by domain",
        "Tokens per problem (sandbox mode, mean per sample)",
    ]


def test_without_matplotlib_the_page_keeps_its_tables_and_says_how_to_get_plots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plots, "available", lambda: False)  # as if the extra were missing
    records = _records()
    page = eval_page(records, summaries(records), config=CONFIG, links={})
    assert "<svg" not in page and 'pip install "sandfleet[report]"' in page
    assert page.count('<table class="summary"') == 2
