"""Issue 27 item 3, through the real CLI against a scripted endpoint: a run whose model
calls submit without an answer (no answer file, no text) is reported as "submitted without
an answer" by `run` (exit 5), `batch` (counted apart, exit 5), `runs`, `show` and every
--json. Before, it exited 0, `runs` said "submitted", and the batch summary called 80 % of
runs "submitted" when none had answered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import TaskScripts, cli_environment, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

ANSWERED = [Reply(tool_calls=[bash("echo 42 > /testbed/output/answer.txt")]),
            Reply(tool_calls=[submit()])]  # fmt: skip
EMPTY = [Reply(tool_calls=[submit()])]


async def test_run_batch_runs_and_show_tell_a_submit_without_an_answer(tmp_path: Path) -> None:
    env = cli_environment(tmp_path / "home")
    results = ("--results-dir", str(tmp_path / "results"))
    common = ("--model", "m", *results, "--state-dir", str(tmp_path / "state"))
    scripts = TaskScripts({"answers": ANSWERED, "nothing": EMPTY})
    (tmp_path / "tasks.jsonl").write_text(
        '{"id": "good", "prompt": "answers"}\n{"id": "bare", "prompt": "nothing"}\n'
    )
    async with ScriptedOpenAIServer(responder=scripts) as server:
        url = ("--base-url", server.base_url)
        run = await run_cli("run", "nothing", "--id", "solo", *url, *common, env=env,
                            cwd=tmp_path)  # fmt: skip
        as_json = await run_cli("run", "nothing", "--id", "solo2", "--json", *url, *common,
                                env=env, cwd=tmp_path)  # fmt: skip
        batch = await run_cli(
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out.jsonl"),
            *url, *common, env=env, cwd=tmp_path,
        )  # fmt: skip
        batch_json = await run_cli(
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out2.jsonl"),
            "--json", *url, *common, env=env, cwd=tmp_path,
        )  # fmt: skip

    assert run.returncode == 5, run
    assert "stop reason submitted (submitted without an answer)" in run.stdout
    assert "answer none: the model called submit without writing the answer file" in run.stdout

    record = json.loads(as_json.stdout)
    assert as_json.returncode == 5, as_json
    assert (record["stop_reason"], record["status"], record["answer"]) == (
        "submitted", "submitted_no_answer", None,
    )  # fmt: skip

    assert batch.returncode == 5, batch
    assert "✓ good submitted" in batch.stdout and "answer: 42" in batch.stdout
    assert "• bare submitted without an answer" in batch.stdout
    rows = {line.split("│")[1].strip(): line for line in batch.stdout.splitlines() if "│" in line}
    assert [c.strip() for c in rows["submitted"].split("│")[2:4]] == ["1", "50%"]
    assert [c.strip() for c in rows["submitted_no_answer"].split("│")[2:4]] == ["1", "50%"]

    assert batch_json.returncode == 5, batch_json
    events = [json.loads(line) for line in batch_json.stdout.splitlines()]
    tasks = {e["id"]: e for e in events if e["event"] == "task"}
    assert tasks["bare"]["status"] == "submitted_no_answer"
    assert tasks["good"]["status"] == "submitted"
    summary = events[-1]
    assert (summary["submitted"], summary["answered"], summary["submitted_no_answer"]) == (2, 1, 1)
    assert summary["by_status"] == {"submitted": 1, "submitted_no_answer": 1}
    assert summary["exit_code"] == 5

    runs = await run_cli("runs", *results, env=env, cwd=tmp_path)
    lines = {line.split()[1]: line for line in runs.stdout.splitlines()[1:] if line.strip()}
    assert "submitted without an answer" in lines["solo"]
    assert "submitted without an answer" not in lines["good"]
    assert lines["good"].rstrip().endswith("42")  # the answer column
    runs_json = await run_cli("runs", "--json", *results, env=env, cwd=tmp_path)
    by_task = {r["task_id"]: r for r in map(json.loads, runs_json.stdout.splitlines())}
    assert by_task["solo"]["status"] == "submitted_no_answer"
    assert by_task["good"]["answer"] == "42"

    show = await run_cli("show", "solo", *results, env=env, cwd=tmp_path)
    assert show.returncode == 0, show
    assert "submitted without an answer" in show.stdout
