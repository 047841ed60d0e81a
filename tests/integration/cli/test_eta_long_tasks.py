"""Issue 27 item 5, through the real CLI: while a task has run longer than every task that
finished, the batch's ETA says "unknown" instead of a number it cannot know. Before, the
estimate took the mean of the finished (quick) tasks and called the long one done: ETA
0:00:00 for as long as it ran (in the report, ten minutes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import TaskScripts, cli_environment, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

ANSWER = bash("echo 1 > /testbed/output/answer.txt")


async def test_the_eta_is_unknown_while_a_task_outlasts_every_finished_one(tmp_path: Path) -> None:
    quick = [Reply(tool_calls=[ANSWER]), Reply(tool_calls=[submit()])]
    slow = [Reply(tool_calls=[ANSWER], delay_s=12.0), Reply(tool_calls=[submit()])]
    scripts = TaskScripts({"quick one": quick, "slow one": slow, "quick two": quick})
    (tmp_path / "tasks.jsonl").write_text(
        '{"id": "a", "prompt": "quick one"}\n{"id": "b", "prompt": "slow one"}\n'
        '{"id": "c", "prompt": "quick two"}\n'
    )
    async with ScriptedOpenAIServer(responder=scripts) as server:
        result = await run_cli(
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out.jsonl"),
            "--json", "--concurrency", "2", "--model", "m", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    tasks = [e for e in map(json.loads, result.stdout.splitlines()) if e["event"] == "task"]
    assert [t["id"] for t in tasks] == ["a", "c", "b"], tasks
    durations = {t["id"]: t["total_time_s"] for t in tasks}
    assert durations["b"] > 2 * max(durations["a"], durations["c"]), durations
    # When c finished, b had run longer than a and c took: nothing to estimate it by.
    assert tasks[1]["eta"] == "unknown", tasks
    assert tasks[2]["eta"] == "0:00:00"  # the last one: nothing left
