"""`sandfleet run` against an endpoint that behaves as real servers do: a context window it
enforces (llama.cpp's and vLLM's 400s), a model that answers in prose, and the request knobs
real endpoints need (--extra-body, --seed, --top-p, --no-undo-edit, --system-prompt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.integration.cli.harness import cli_environment, read_jsonl, run_cli, run_folder
from tests.support.scripted_openai import ContextWindow, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

BIG_OUTPUT = "seq 1 2000"
"""About 2,800 scripted tokens of output: more than the windows below leave room for."""


def flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--model", "scripted-model",
        "--base-url", server.base_url,
        "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
        "--quiet",
    ]  # fmt: skip


def outcome_and_records(tmp_path: Path, task_id: str) -> tuple[dict[str, Any], list[Any]]:
    folder = run_folder(tmp_path / "results", task_id)
    outcome = json.loads((folder / "result.json").read_text())
    return outcome, read_jsonl(folder / "trajectory.jsonl")


@pytest.mark.parametrize("server_kind", ["llama.cpp", "vllm"])
async def test_an_overflow_nothing_can_fix_ends_as_context_exceeded_with_a_result(
    tmp_path: Path, server_kind: Literal["llama.cpp", "vllm"]
) -> None:
    # The window is smaller than the first request: no observation yet, nothing to clip.
    window = ContextWindow(50, server=server_kind)
    script = [Reply(text="Let me count the lines.", tool_calls=[bash(BIG_OUTPUT)])]
    async with ScriptedOpenAIServer(script, context_window=window) as server:
        result = await run_cli(
            "run", "Count the lines.", "--id", "overflow", *flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        overflows = server.overflows

    assert result.returncode == 1, result  # not submitted; never 3 (a model error)
    assert overflows >= 1
    outcome, records = outcome_and_records(tmp_path, "overflow")
    assert outcome["stop_reason"] == "context_exceeded"
    assert outcome["turns"] == 1
    assert "context" in outcome["error"]
    assert records[-1]["kind"] == "result" and records[-1]["stop_reason"] == "context_exceeded"


@pytest.mark.parametrize("server_kind", ["llama.cpp", "vllm"])
async def test_a_latest_output_that_alone_overflows_is_clipped_and_the_run_goes_on(
    tmp_path: Path, server_kind: Literal["llama.cpp", "vllm"]
) -> None:
    # The case: one big output (a whole file viewed) pushes the next request past the
    # window. Nothing older can be clipped, so the latest output is, and the model goes on.
    window = ContextWindow(1500, server=server_kind, above_first_request=True)
    script = [
        Reply(text="Let me count the lines.", tool_calls=[bash(BIG_OUTPUT)]),
        Reply(text="2000", tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script, context_window=window) as server:
        result = await run_cli(
            "run", "Count the lines.", "--id", "overflow", *flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        overflows = server.overflows
        last_body = server.chat_requests[-1].body

    assert result.returncode == 0, result
    assert overflows == 1
    outcome, records = outcome_and_records(tmp_path, "overflow")
    assert outcome["stop_reason"] == "submitted"
    (notice,) = [r for r in records if r.get("event") == "context_shortened"]
    assert notice["kept_turns"] == 0 and [c["turn"] for c in notice["clipped"]] == [1]
    tool_message = next(m for m in last_body["messages"] if m["role"] == "tool")
    assert "characters clipped here" in tool_message["content"]


async def test_an_overflow_clips_old_observations_and_the_run_submits(tmp_path: Path) -> None:
    # Turn 1's big output fits; turn 2 adds a little more and the third request overflows,
    # until turn 1's output is clipped.
    window = ContextWindow(3200, server="llama.cpp", above_first_request=True)
    script = [
        Reply(text="Let me look.", tool_calls=[bash(BIG_OUTPUT)]),
        Reply(tool_calls=[bash("seq 1 300")]),
        Reply(text="done", tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script, context_window=window) as server:
        result = await run_cli(
            "run", "Count the lines.", "--id", "shortened", *flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        bodies = [request.body for request in server.chat_requests]
        overflows = server.overflows

    assert result.returncode == 0, result
    assert overflows == 1
    outcome, records = outcome_and_records(tmp_path, "shortened")
    assert (outcome["stop_reason"], outcome["turns"]) == ("submitted", 3)
    (notice,) = [r for r in records if r.get("event") == "context_shortened"]
    assert notice["turn"] == 3 and [c["turn"] for c in notice["clipped"]] == [1]
    assert "exceeds the available context size" in notice["reason"]
    tools = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "tool"]
    assert "characters clipped here" in tools[0] and "\n300\n" in tools[1]
    assert bodies[-1]["messages"][1]["content"].startswith("Count the lines.")


async def test_prose_replies_stop_after_max_nudges_with_the_prose_as_the_answer(
    tmp_path: Path,
) -> None:
    script = [Reply(text="The answer is 42.")] * 3
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "What is 6*7?", "--id", "prose", "--max-nudges", "2",
            *flags(server, tmp_path), env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        requests = len(server.chat_requests)

    assert result.returncode == 1, result
    assert requests == 3
    outcome, records = outcome_and_records(tmp_path, "prose")
    assert (outcome["stop_reason"], outcome["turns"]) == ("no_tool_call", 3)
    assert outcome["answer"] == "The answer is 42."
    assert records[-1]["stop_reason"] == "no_tool_call"


async def test_request_knobs_reach_every_request(tmp_path: Path) -> None:
    system_prompt = tmp_path / "system.txt"
    system_prompt.write_text("You are terse. Answer into {answer_file}.\n")
    script = [Reply(tool_calls=[bash("echo 1 > output/answer.txt")]), Reply(tool_calls=[submit()])]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "Write 1.", "--id", "knobs", *flags(server, tmp_path),
            "--extra-body", '{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 20}',
            "--top-p", "0.9", "--no-undo-edit", "--system-prompt", str(system_prompt),
            env=cli_environment(tmp_path / "home", SANDFLEET_SEED="1234"), cwd=tmp_path,
        )  # fmt: skip
        bodies = [request.body for request in server.chat_requests]

    assert result.returncode == 0, result
    assert len(bodies) == 2
    for body in bodies:
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert body["top_k"] == 20
        assert (body["top_p"], body["seed"]) == (0.9, 1234)
        (editor,) = [t for t in body["tools"] if t["function"]["name"] == "str_replace_editor"]
        commands = editor["function"]["parameters"]["properties"]["command"]["enum"]
        assert "undo_edit" not in commands and "str_replace" in commands
    assert bodies[0]["messages"][0] == {
        "role": "system",
        "content": "You are terse. Answer into /testbed/output/answer.txt.\n",
    }


async def test_without_the_knobs_requests_carry_none_of_them(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as server:
        result = await run_cli(
            "run", "Nothing.", "--id", "plain", *flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        (body,) = [request.body for request in server.chat_requests]

    assert result.returncode == 0, result
    assert not {"top_p", "seed", "chat_template_kwargs"} & body.keys()
    (editor,) = [t for t in body["tools"] if t["function"]["name"] == "str_replace_editor"]
    assert "undo_edit" in editor["function"]["parameters"]["properties"]["command"]["enum"]


@pytest.mark.parametrize(
    ("value", "why"),
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")],
)
async def test_an_invalid_extra_body_is_a_usage_error_in_one_line(
    tmp_path: Path, value: str, why: str
) -> None:
    result = await run_cli(
        "run", "x", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
        "--extra-body", value, env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert why in result.stderr and "--extra-body" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
