"""`sandfleet batch`: concurrency, one failing task, crash-safe results, resume and retry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    TaskScripts,
    cli_environment,
    live_sandboxes,
    press_ctrl_c,
    read_jsonl,
    read_until,
    run_cli,
    run_folder,
    start_cli,
)
from tests.support.scripted_openai import (
    Fail,
    Hang,
    Reply,
    ScriptedOpenAIServer,
    Step,
    bash,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

TASK_COUNT = 10
FAILING = "task-05"


def answering_script(task_id: str) -> list[Step]:
    return [
        Reply(tool_calls=[bash(f"echo answer-{task_id} > output/answer.txt")], prompt_tokens=100),
        Reply(tool_calls=[submit()], prompt_tokens=120),
    ]


def write_tasks(path: Path) -> list[str]:
    ids = [f"task-{n:02d}" for n in range(1, TASK_COUNT + 1)]
    lines: list[dict[str, object]] = [{"id": i, "prompt": f"Solve {i}."} for i in ids]
    lines[2]["files"] = {"notes.txt": "inline input"}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return ids


def batch_flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--out", str(tmp_path / "results.jsonl"),
        "--concurrency", "4",
        "--model", "scripted-model",
        "--base-url", server.base_url,
        "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


async def test_one_failing_task_does_not_stop_the_batch_and_resume_skips_finished_ids(
    tmp_path: Path,
) -> None:
    ids = write_tasks(tmp_path / "tasks.jsonl")
    scripts = {task_id: answering_script(task_id) for task_id in ids}
    scripts[FAILING] = [Fail(400, "this prompt is rejected")]
    env = cli_environment(tmp_path / "home")

    async with ScriptedOpenAIServer(responder=TaskScripts(scripts)) as server:
        first = await run_cli(
            "batch", "tasks.jsonl", *batch_flags(server, tmp_path), env=env, cwd=tmp_path
        )
        requests_after_first = len(server.chat_requests)
        lines_after_first = read_jsonl(tmp_path / "results.jsonl")
        resumed = await run_cli(
            "batch", "tasks.jsonl", *batch_flags(server, tmp_path), env=env, cwd=tmp_path
        )
        requests_after_resume = len(server.chat_requests)
        lines_after_resume = read_jsonl(tmp_path / "results.jsonl")
        scripts[FAILING] = answering_script(FAILING)
        retried = await run_cli(
            "batch", "tasks.jsonl", "--retry-failed", *batch_flags(server, tmp_path),
            env=env, cwd=tmp_path,
        )  # fmt: skip

    assert first.returncode == 1, first
    assert sorted(line["id"] for line in lines_after_first) == ids
    by_id = {line["id"]: line for line in lines_after_first}
    assert by_id[FAILING]["stop_reason"] == "model_error"
    assert "this prompt is rejected" in by_id[FAILING]["error"]
    assert all(by_id[i]["stop_reason"] == "submitted" for i in ids if i != FAILING)
    assert by_id["task-03"]["answer"] == "answer-task-03"
    answer_file = run_folder(tmp_path / "results", "task-07") / "output" / "answer.txt"
    assert answer_file.read_text() == "answer-task-07\n"
    assert "batch summary" in first.stdout
    assert "model_error" in first.stdout and "submitted" in first.stdout
    assert "tasks/min" in first.stdout
    assert "10 tasks: 0 already in" in first.stdout

    assert resumed.returncode == 1, resumed
    assert "10 tasks: 10 already in" in resumed.stdout
    assert requests_after_resume == requests_after_first
    assert lines_after_resume == lines_after_first

    assert retried.returncode == 0, retried
    assert "1 to run" in retried.stdout
    final = read_jsonl(tmp_path / "results.jsonl")
    assert len(final) == TASK_COUNT + 1
    assert final[-1]["id"] == FAILING and final[-1]["stop_reason"] == "submitted"
    assert live_sandboxes(tmp_path / "state") == []


async def test_a_bad_task_line_stops_the_batch_before_any_task(tmp_path: Path) -> None:
    # Found up front since issue 27 (it used to become an invalid_task line in --out, which a
    # corrected rerun then skipped): test_bad_batch_lines.py has the whole case.
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "good", "prompt": "Solve good."}) + "\n"
        + json.dumps({"id": "no-folder", "task_dir": "does/not/exist"}) + "\n"
    )  # fmt: skip
    async with ScriptedOpenAIServer(
        responder=TaskScripts({"good": answering_script("good")})
    ) as server:
        result = await run_cli(
            "batch", str(tasks), *batch_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        assert server.chat_requests == []

    assert result.returncode == 2, result
    assert "no-folder: task folder not found" in result.stderr
    assert not (tmp_path / "results.jsonl").exists()


async def test_an_interrupted_batch_keeps_finished_lines_and_resumes_the_rest(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": f"Solve {i}."}) + "\n" for i in "abc"))
    scripts: dict[str, list[Step]] = {"Solve a": answering_script("a")}
    scripts["Solve b"] = [Hang()]
    scripts["Solve c"] = [Hang()]
    env = cli_environment(tmp_path / "home")

    async with ScriptedOpenAIServer(responder=TaskScripts(scripts)) as server:
        process = await start_cli(
            "batch", str(tasks), *batch_flags(server, tmp_path), env=env, cwd=tmp_path
        )
        assert process.stdout is not None
        await read_until(process.stdout, "✓ a submitted", timeout_s=CLI_TIMEOUT_S)
        press_ctrl_c(process)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            rest = (await process.stdout.read()).decode()
            await process.wait()
        interrupted_lines = read_jsonl(tmp_path / "results.jsonl")
        scripts["Solve b"] = answering_script("b")
        scripts["Solve c"] = answering_script("c")
        resumed = await run_cli(
            "batch", str(tasks), *batch_flags(server, tmp_path), env=env, cwd=tmp_path
        )

    assert process.returncode == 130, rest
    assert "run the same command again to resume" in rest
    assert [line["id"] for line in interrupted_lines] == ["a"]
    assert resumed.returncode == 0, resumed
    assert "3 tasks: 1 already in" in resumed.stdout
    assert sorted(line["id"] for line in read_jsonl(tmp_path / "results.jsonl")) == ["a", "b", "c"]
    assert live_sandboxes(tmp_path / "state") == []


async def test_sandboxes_that_cannot_start_become_failed_lines_not_a_crash(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": f"Solve {i}."}) + "\n" for i in "xy"))
    not_a_directory = tmp_path / "state-is-a-file"
    not_a_directory.write_text("")

    result = await run_cli(
        "batch", str(tasks), "--out", str(tmp_path / "results.jsonl"),
        "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
        "--state-dir", str(not_a_directory), "--no-preflight",
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 1, result
    lines = read_jsonl(tmp_path / "results.jsonl")
    assert sorted(line["id"] for line in lines) == ["x", "y"]
    assert {line["stop_reason"] for line in lines} == {"launch_failed"}
    assert all("the sandbox did not start" in line["error"] for line in lines)
    assert "launch_failed" in result.stdout
