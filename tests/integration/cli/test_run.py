"""`sandfleet run` end to end: the console script, a scripted endpoint, a real local sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sandfleet.agent import AgentConfig, Task
from sandfleet.cli.execution import execute_task
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec
from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    cli_environment,
    live_sandboxes,
    press_ctrl_c,
    read_jsonl,
    read_until,
    records_of,
    run_cli,
    run_folder,
    start_cli,
)
from tests.support.agent_fakes import ScriptedModel
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


def common_flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--model", "scripted-model",
        "--base-url", server.base_url,
        "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


async def test_a_prompt_runs_to_submit_and_leaves_answer_trajectory_and_result(
    tmp_path: Path,
) -> None:
    script = [
        Reply(text="I will write the answer.", tool_calls=[bash("echo 391 > output/answer.txt")]),
        Reply(tool_calls=[submit()], prompt_tokens=30, completion_tokens=7),
    ]
    prompt = "What is 17 * 23? Write it to the answer file."
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", prompt, "--id", "multiply", *common_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home", OPENAI_API_KEY="sk-from-env"), cwd=tmp_path,
        )  # fmt: skip
        requests = server.chat_requests

    assert result.returncode == 0, result
    folder = run_folder(tmp_path / "results", "multiply")
    assert "turn 1/100" in result.stdout
    assert "execute_bash echo 391 > output/answer.txt" in result.stdout
    assert "submitted" in result.stdout
    assert "391" in result.stdout
    assert str(folder / "trajectory.jsonl") in result.stdout
    assert str(folder / "result.json") in result.stdout
    outcome = json.loads((folder / "result.json").read_text())
    assert outcome["stop_reason"] == "submitted"
    assert outcome["answer"] == "391"
    assert outcome["turns"] == 2
    assert outcome["prompt_tokens"] == 40 and outcome["completion_tokens"] == 12
    assert outcome["output_files"] == ["answer.txt"]
    assert (folder / "output" / "answer.txt").read_text() == "391\n"
    kinds = [record["kind"] for record in read_jsonl(folder / "trajectory.jsonl")]
    assert kinds[0] == "meta" and kinds[-1] == "result" and "task_inputs" not in kinds
    assert requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert requests[0].body["model"] == "scripted-model"
    assert prompt in requests[0].body["messages"][1]["content"]
    assert live_sandboxes(tmp_path / "state") == []


async def test_a_seed_task_folder_gets_its_templates_input_files_and_output_back(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "07_shout"
    (folder / "input").mkdir(parents=True)
    (folder / "prompt.txt").write_text("Shout the words in words.txt.\n")
    (folder / "prompt_config.yaml").write_text(
        "system_prompt: |-\n  Inputs live in {input_dir}; outputs go to {output_dir}.\n"
        "instance_prompt: |-\n  <problem>\n  {problem_statement}\n  </problem>\n"
        "  Working directory: {working_dir}\n"
    )
    (folder / "input" / "words.txt").write_text("hello sandbox\n")
    extra = tmp_path / "extra.txt"
    extra.write_text("second file\n")
    shout = "tr a-z A-Z < input/words.txt > output/loud.txt; cat output/loud.txt"
    script = [
        Reply(tool_calls=[bash(shout)]),
        Reply(tool_calls=[bash("cat input/extra.txt && echo HELLO SANDBOX > output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", str(folder), "--file", str(extra), *common_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        messages = server.chat_requests[0].body["messages"]

    assert result.returncode == 0, result
    results = run_folder(tmp_path / "results", "07_shout")
    meta = next(records_of(results / "trajectory.jsonl", "meta"))
    paths = meta["paths"]
    assert messages[0]["content"] == (
        f"Inputs live in {paths['input_dir']}; outputs go to {paths['output_dir']}."
    )
    assert messages[1]["content"] == (
        "<problem>\nShout the words in words.txt.\n</problem>\n"
        f"Working directory: {paths['working_dir']}"
    )
    observations = [r["output"] for r in records_of(results / "trajectory.jsonl", "observation")]
    assert "HELLO SANDBOX" in observations[0]
    assert "second file" in observations[1]
    assert (results / "output" / "loud.txt").read_text() == "HELLO SANDBOX\n"
    assert json.loads((results / "result.json").read_text())["output_files"] == [
        "answer.txt",
        "loud.txt",
    ]
    assert {entry["name"]: entry["content"] for entry in meta["input_files"]} == {
        "words.txt": "hello sandbox\n",
        "extra.txt": "second file\n",
    }


async def test_running_out_of_turns_exits_1_and_says_so(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[bash("echo thinking")]), Reply(tool_calls=[bash("echo more")])]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "Never finishes.", "--max-turns", "2", "--json",
            *common_flags(server, tmp_path), env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 1, result
    record = json.loads(result.stdout)
    assert record["stop_reason"] == "max_turns"
    assert record["turns"] == 2


async def test_an_endpoint_that_rejects_the_request_exits_3_with_the_reason(
    tmp_path: Path,
) -> None:
    script = [Fail(401, "invalid api key")]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "Anything.", *common_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 3, result
    assert "model_error" in result.stdout
    assert "invalid api key" in result.stdout
    assert live_sandboxes(tmp_path / "state") == []


async def test_a_missing_task_path_or_model_is_a_usage_error(tmp_path: Path) -> None:
    env = cli_environment(tmp_path / "home")

    missing_task = await run_cli("run", "tasks/nope", "--model", "m", env=env, cwd=tmp_path)
    missing_model = await run_cli("run", "Say hi.", env=env, cwd=tmp_path)

    assert missing_task.returncode == 2, missing_task
    assert "no such file or folder: tasks/nope" in missing_task.stderr
    assert missing_model.returncode == 2, missing_model
    assert "no model given" in missing_model.stderr


async def test_ctrl_c_reclaims_the_sandbox_and_records_a_cancelled_result(tmp_path: Path) -> None:
    script: list[Step] = [Reply(tool_calls=[bash("echo started > output/progress.txt")]), Hang()]
    async with ScriptedOpenAIServer(script) as server:
        process = await start_cli(
            "run", "Take your time.", "--id", "slow", *common_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        await server.wait_for_requests(2, timeout_s=CLI_TIMEOUT_S)
        await read_until(process.stdout, "turn 2/100", timeout_s=CLI_TIMEOUT_S)
        press_ctrl_c(process)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            rest = await process.stdout.read()
            await process.wait()

    assert process.returncode == 130, rest.decode()
    assert "cancelled" in rest.decode()
    outcome = json.loads((run_folder(tmp_path / "results", "slow") / "result.json").read_text())
    assert outcome["stop_reason"] == "cancelled"
    assert outcome["turns"] == 2
    results = list(
        records_of(run_folder(tmp_path / "results", "slow") / "trajectory.jsonl", "result")
    )
    assert [r["stop_reason"] for r in results] == ["cancelled"]
    assert live_sandboxes(tmp_path / "state") == []


async def test_an_input_file_that_vanished_since_loading_is_an_invalid_task(
    tmp_path: Path,
) -> None:
    vanished = tmp_path / "vanished.csv"
    spec = TaskSpec(Task(id="gone", prompt="p", files={"data.csv": vanished}))
    settings = Settings(results_dir=tmp_path / "results", state_dir=tmp_path / "state")

    outcome = await execute_task(
        spec, model=ScriptedModel([]), config=AgentConfig(model="m"), settings=settings
    )

    assert outcome.stop_reason == "invalid_task"
    assert f"cannot read the input file {vanished} (for data.csv)" in (outcome.error or "")
    folder = run_folder(tmp_path / "results", "gone")
    assert json.loads((folder / "result.json").read_text())["stop_reason"] == "invalid_task"
    assert not (folder / "trajectory.jsonl").exists()
    assert live_sandboxes(tmp_path / "state") == []
