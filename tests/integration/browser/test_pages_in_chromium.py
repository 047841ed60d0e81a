"""The HTML pages in a real browser: report.html of a real eval, a run page, the runs list.

Each page is opened from disk by headless Chromium (tests/support/chromium.py); the test
reads the DOM after load (plots are SVG elements, one section per turn, rows link to pages
that exist), checks the console stayed empty and keeps a screenshot under .test-artifacts/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.cli.harness import TaskScripts, cli_environment, read_jsonl, run_cli
from tests.support.chromium import artifacts_dir, chromium_or_skip, open_page
from tests.support.example_bench import EXAMPLE, EXAMPLE_SOLUTIONS
from tests.support.scripted_openai import RecordedRequest, Reply, ScriptedOpenAIServer, Step

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

SHIPPED_TRAJECTORY = EXAMPLE.parents[1] / "trajectories" / "sales_by_region.jsonl"


def _wrong_answer(request: RecordedRequest) -> Step:
    return Reply(text="0")  # plain-LLM mode: no sandbox, a wrong guess


def _eval_args(out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        "eval", str(EXAMPLE), "--out", str(out), "--model", "scripted-model",
        "--base-url", base_url, "--max-retries", "0", "--samples", "2", "--limit", "2",
        "--concurrency", "4", "--state-dir", str(out.parent / "state"), *extra,
    ]  # fmt: skip


async def test_report_html_shows_plots_and_links_each_sample_to_its_run_page(
    tmp_path: Path,
) -> None:
    browser = chromium_or_skip()
    out, env = tmp_path / "out", cli_environment(tmp_path / "home")
    async with ScriptedOpenAIServer(responder=TaskScripts(EXAMPLE_SOLUTIONS)) as server:
        sandbox = await run_cli(*_eval_args(out, server.base_url), env=env, cwd=tmp_path)
    async with ScriptedOpenAIServer(responder=_wrong_answer) as server:
        llm = await run_cli(
            *_eval_args(out, server.base_url, "--mode", "llm"), env=env, cwd=tmp_path
        )
    assert sandbox.returncode == 0, sandbox
    assert llm.returncode == 0, llm
    shots = artifacts_dir("browser")

    report = open_page(browser, out / "report.html", shots / "report.png", tmp_path / "profile")
    assert report.console == []
    plots = report.elements("figure", class_="plot")
    assert [plot.attributes["data-plot"] for plot in plots] == [
        "Mean score by domain: sandbox vs llm",
        "Tokens per problem (sandbox mode, mean per sample)",
        "Time per problem (sandbox mode, mean per sample)",
        "pass@k",
    ]
    assert len(report.elements("svg")) >= len(plots)
    samples = read_jsonl(out / "samples.jsonl")
    links = [
        a.attributes["href"] for a in report.elements("a") if a.attributes["href"].endswith(".html")
    ]
    assert len(links) == len(samples) == 8 and all((out / link).is_file() for link in links)

    # A sandbox sample's page: as many turn sections as the sample took turns.
    record = next(r for r in samples if r["mode"] == "sandbox")
    page_path = Path(record["trajectory"]).with_suffix(".html")
    run = open_page(browser, page_path, shots / "run.png", tmp_path / "profile")
    assert run.console == []
    assert len(run.elements("section", class_="turn")) == record["turns"] == 2
    assert run.elements("a", href="../../../report.html")


async def test_the_runs_list_links_each_run_page(tmp_path: Path) -> None:
    browser = chromium_or_skip()
    results = tmp_path / "results"
    for name in ("2026-01-01-a", "2026-01-02-b"):
        (results / name).mkdir(parents=True)
        shutil.copy(SHIPPED_TRAJECTORY, results / name / "trajectory.jsonl")
    env = cli_environment(tmp_path / "home")
    listed = await run_cli("runs", "--html", "--results-dir", str(results), env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed
    index = Path(listed.stdout.strip())
    assert index == results / "index.html"

    shots = artifacts_dir("browser")
    page = open_page(browser, index, shots / "runs.png", tmp_path / "profile")
    assert page.console == []
    hrefs = [a.attributes["href"] for a in page.elements("a")]
    assert sorted(hrefs) == ["2026-01-01-a/trajectory.html", "2026-01-02-b/trajectory.html"]

    shown = await run_cli(
        "show", "2026-01-01-a", "--html", "--results-dir", str(results), env=env, cwd=tmp_path
    )
    assert shown.returncode == 0, shown
    turns = {
        json.loads(line).get("turn") or 0 for line in SHIPPED_TRAJECTORY.read_text().splitlines()
    }
    run = open_page(browser, Path(shown.stdout.strip()), shots / "show.png", tmp_path / "profile")
    assert run.console == []
    assert len(run.elements("section", class_="turn")) == max(turns) == 7
    assert len(run.elements("details")) >= 1  # long observations collapsed, whole on click
