"""Issue 27 item 8, through the real CLI: every batch line that cannot become a task (no
prompt, a task_dir that does not exist) is reported before any task starts, exit 2, and
nothing is recorded in --out, so the corrected file runs them without --retry-failed.
Before, such lines became `invalid_task` results at run time (exit 1), recorded in --out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, live_sandboxes, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def test_bad_lines_are_all_reported_before_any_task_and_never_recorded(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "prompt": "fine"}\n{"id": "b"}\n{"id": "c", "task_dir": "nope"}\n'
    )
    out = tmp_path / "out.jsonl"
    env = cli_environment(tmp_path / "home")
    common = ("--model", "m", "--results-dir", str(tmp_path / "results"),
              "--state-dir", str(tmp_path / "state"))  # fmt: skip
    script = [Reply(tool_calls=[bash("echo 1 > /testbed/output/answer.txt")]),
              Reply(tool_calls=[submit()])] * 3  # fmt: skip
    async with ScriptedOpenAIServer(script) as server:
        bad = await run_cli(
            "batch", str(tasks), "--out", str(out), "--base-url", server.base_url, *common,
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert server.chat_requests == []  # nothing ran
        assert bad.returncode == 2, bad
        assert "2 tasks of" in bad.stderr and "no task was started" in bad.stderr
        assert "b: task b: needs a prompt or a task_dir" in bad.stderr
        assert "c: " in bad.stderr and "nope" in bad.stderr
        assert not out.exists()
        assert live_sandboxes(tmp_path / "state") == []

        (tmp_path / "nope").mkdir()
        (tmp_path / "nope" / "prompt.txt").write_text("fine too")
        tasks.write_text(
            '{"id": "a", "prompt": "fine"}\n{"id": "b", "prompt": "fine"}\n'
            '{"id": "c", "task_dir": "nope"}\n'
        )
        fixed = await run_cli(
            "batch", str(tasks), "--out", str(out), "--base-url", server.base_url,
            "--concurrency", "1", *common, env=env, cwd=tmp_path,
        )  # fmt: skip

    assert fixed.returncode == 0, fixed  # no --retry-failed needed
    assert "3 tasks: 0 already in" in fixed.stdout
