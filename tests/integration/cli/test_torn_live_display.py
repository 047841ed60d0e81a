"""Issue 27 items 4 and 10, on a real pseudo-terminal: a log warning during a batch (the
context of a task is shortened) is printed on a line of its own above the progress display,
as a short `warning: event key=value` line, never into the middle of the progress or
"running:" line; and a tool that runs for seconds shows a ticking line meanwhile.

Before, the warning went straight to the stderr captured when logging was set up, past
rich's live display: `running: csv_region 40s, needle 40s2026-11-27T20:05:13Z [warning ]
context_shortened ...`.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.integration.cli.harness import TaskScripts, cli_environment, run_cli
from tests.integration.cli.terminal import lines_written, run_on_terminal, visible_lines
from tests.support.scripted_openai import (
    ContextWindow,
    Reply,
    ScriptedOpenAIServer,
    bash,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

LONG_OUTPUT = bash("seq 1 6000")  # ~29 KB: more than the window leaves, so it gets clipped
ANSWER = bash("echo done > /testbed/output/answer.txt")


async def test_a_warning_during_a_batch_never_splits_the_progress_line(tmp_path: Path) -> None:
    steps = [Reply(tool_calls=[LONG_OUTPUT], delay_s=1.0), Reply(tool_calls=[ANSWER]),
             Reply(tool_calls=[submit()], delay_s=1.0)]  # fmt: skip
    scripts = TaskScripts({"first": steps, "second": steps})
    (tmp_path / "tasks.jsonl").write_text(
        '{"id": "one", "prompt": "first"}\n{"id": "two", "prompt": "second"}\n'
    )
    window = ContextWindow(tokens=3000, above_first_request=True)
    async with ScriptedOpenAIServer(responder=scripts, context_window=window) as server:
        code, raw = await asyncio.to_thread(
            run_on_terminal,
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out.jsonl"),
            "--concurrency", "2", "--model", "m", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert code == 0, raw
    assert server.overflows >= 2, raw  # each task's context was shortened at least once
    lines = lines_written(raw)
    warnings = [line for line in lines if "context_shortened" in line]
    assert len(warnings) >= 2, raw
    for line in warnings:  # a line of its own, short, for people
        assert line.startswith("warning: context_shortened task="), repr(line)
    for line in lines:
        if "running:" in line or "tasks/min" in line:
            assert "warning" not in line and "context_shortened" not in line, repr(line)


async def test_a_tool_that_runs_for_seconds_shows_a_ticking_line(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[bash("sleep 3; echo 7 > /testbed/output/answer.txt")]),
              Reply(tool_calls=[submit()])]  # fmt: skip
    async with ScriptedOpenAIServer(script) as server:
        code, raw = await asyncio.to_thread(
            run_on_terminal,
            "run", "Wait, then answer.", "--id", "ticks", "--model", "m",
            "--base-url", server.base_url, "--results-dir", str(tmp_path / "results"),
            "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert code == 0, raw
    seconds = {int(s) for s in re.findall(r"execute_bash running (\d+)s", raw)}
    assert {0, 1, 2} <= seconds, raw  # it ticks while the command runs
    # Transient: once the observation came, the trace has no ticking line left.
    assert not any("running" in line for line in visible_lines(raw)[-12:] if "←" in line)


async def test_logs_are_text_unless_asked_and_go_to_a_log_file_when_given(tmp_path: Path) -> None:
    # Piped, the old default was JSON lines in the middle of the trace (2>&1 | less).
    steps = [Reply(tool_calls=[LONG_OUTPUT]), Reply(tool_calls=[ANSWER]),
             Reply(tool_calls=[submit()])]  # fmt: skip
    env = cli_environment(tmp_path / "home")
    log_file = tmp_path / "sandfleet.log"
    results = []
    for extra in ((), ("--log-format", "json"), ("--log-file", str(log_file))):
        window = ContextWindow(tokens=3000, above_first_request=True)
        async with ScriptedOpenAIServer(steps, context_window=window) as server:
            result = await run_cli(
                "run", "first", *extra, "--model", "m", "--base-url", server.base_url,
                "--results-dir", str(tmp_path / "results"),
                "--state-dir", str(tmp_path / "state"), env=env, cwd=tmp_path,
            )  # fmt: skip
        results.append(result)
    text, as_json, to_file = results

    assert all(r.returncode == 0 for r in results), results
    assert "warning: context_shortened task=" in text.stderr, text
    assert "{" not in text.stderr
    line = next(line for line in as_json.stderr.splitlines() if "context_shortened" in line)
    assert json.loads(line)["event"] == "context_shortened"
    assert "context_shortened" not in to_file.stderr + to_file.stdout
    assert "warning: context_shortened task=" in log_file.read_text()
