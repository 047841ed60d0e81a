"""The agent loop through the real openai client against a scripted endpoint on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandfleet.agent import (
    AgentConfig,
    AgentResult,
    StopReason,
    Task,
    TrajectoryWriter,
    openai_model,
    read_trajectory,
    run_agent,
)
from tests.support.agent_fakes import FakeSandbox
from tests.support.scripted_openai import (
    Fail,
    Hang,
    Reply,
    ScriptedCall,
    ScriptedOpenAIServer,
    bash,
    context_length_failure,
    submit,
)

pytestmark = pytest.mark.integration

TASK = Task(id="math-1", prompt="What is 6*7?")


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer() as scripted:
        yield scripted


def config_for(server: ScriptedOpenAIServer, **overrides: Any) -> AgentConfig:
    settings: dict[str, Any] = {
        "model": "scripted-model",
        "base_url": server.base_url,
        "max_retries": 0,
    }
    settings.update(overrides)
    return AgentConfig(**settings)


async def run(
    server: ScriptedOpenAIServer,
    sandbox: FakeSandbox | None = None,
    trajectory: TrajectoryWriter | None = None,
    **overrides: Any,
) -> AgentResult:
    config = config_for(server, **overrides)
    model = openai_model(config)
    try:
        return await run_agent(TASK, sandbox or FakeSandbox(), model, config, trajectory=trajectory)
    finally:
        await model.aclose()


def messages(server: ScriptedOpenAIServer, index: int) -> list[dict[str, Any]]:
    body = server.chat_requests[index].body
    assert isinstance(body, dict)
    return list(body["messages"])


async def test_requests_carry_the_tools_the_transcript_and_the_sampling_settings(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(
        Reply(text="Let me compute.", tool_calls=[bash("python3 -c 'print(6*7)'")]),
        Reply(tool_calls=[submit()]),
    )
    result = await run(server, max_tokens=512, temperature=0.25)
    assert result.stop_reason is StopReason.SUBMITTED

    first = server.chat_requests[0].body
    assert first["model"] == "scripted-model"
    assert first["max_tokens"] == 512
    assert first["temperature"] == 0.25
    assert [t["function"]["name"] for t in first["tools"]] == [
        "str_replace_editor",
        "execute_bash",
        "submit",
    ]
    assert all(t["type"] == "function" for t in first["tools"])
    assert first["tools"][0]["function"]["parameters"]["required"] == ["command", "path"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "What is 6*7?" in first["messages"][1]["content"]
    assert "/testbed/output/answer.txt" in first["messages"][0]["content"]

    second = messages(server, 1)
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    call = second[2]["tool_calls"][0]
    assert second[2]["content"] == "Let me compute."
    assert call["function"] == {
        "name": "execute_bash",
        "arguments": json.dumps({"command": "python3 -c 'print(6*7)'"}),
    }
    assert second[3]["tool_call_id"] == call["id"]
    assert second[3]["content"].startswith("Exit code: 0\nExecution output of \\[execute_bash]:")


async def test_omitted_settings_are_left_to_the_endpoint(server: ScriptedOpenAIServer) -> None:
    server.add(Reply(tool_calls=[submit()]))
    await run(server, offer_undo_edit=False)
    body = server.chat_requests[0].body
    assert "max_tokens" not in body
    assert "temperature" not in body
    enum = body["tools"][0]["function"]["parameters"]["properties"]["command"]["enum"]
    assert enum == ["view", "create", "str_replace", "insert"]


async def test_bad_tool_calls_are_answered_with_errors_and_the_run_goes_on(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(
        Reply(tool_calls=[ScriptedCall("execute_bash", '{"command": "ls"')]),
        Reply(tool_calls=[ScriptedCall("run_python", {"code": "print(1)"})]),
        Reply(tool_calls=[ScriptedCall("str_replace_editor", {"path": "/testbed/a.py"})]),
        Reply(tool_calls=[ScriptedCall("str_replace_editor", {"command": "view", "path": 7})]),
        Reply(tool_calls=[submit()]),
    )
    sandbox = FakeSandbox()
    result = await run(server, sandbox)
    assert result.stop_reason is StopReason.SUBMITTED
    assert sandbox.tool_calls == []
    errors = [messages(server, i)[-1]["content"] for i in range(1, 5)]
    assert "arguments for execute_bash are not valid JSON" in errors[0]
    assert errors[1] == "Unknown action: run_python"
    assert "str_replace_editor needs the parameter `command`" in errors[2]
    assert "`path` of str_replace_editor must be a string, got a number 7" in errors[3]
    assert all(messages(server, i)[-1]["role"] == "tool" for i in range(1, 5))


async def test_a_reply_without_a_tool_call_is_nudged_as_a_user_message(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(Reply(text="The answer is 42."), Reply(tool_calls=[submit()]))
    result = await run(server)
    assert result.turns == 2
    assert result.answer == "The answer is 42."
    last = messages(server, 1)[-2:]
    assert last[0] == {"role": "assistant", "content": "The answer is 42."}
    assert last[1]["role"] == "user"
    assert "did not call any tool" in last[1]["content"]


async def test_several_tool_calls_in_one_reply_run_in_order(server: ScriptedOpenAIServer) -> None:
    server.add(
        Reply(tool_calls=[bash("echo 42 > output/answer.txt"), bash("cat output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    )
    sandbox = FakeSandbox()
    result = await run(server, sandbox)
    assert [args["command"] for _, args in sandbox.tool_calls] == [
        "echo 42 > output/answer.txt",
        "cat output/answer.txt",
    ]
    transcript = messages(server, 1)
    ids = [call["id"] for call in transcript[2]["tool_calls"]]
    assert [(m["role"], m["tool_call_id"]) for m in transcript[3:]] == [
        ("tool", ids[0]),
        ("tool", ids[1]),
    ]
    assert result.answer == "42"
    assert result.output_files == ["/testbed/output/answer.txt"]


async def test_a_429_is_retried_and_the_run_carries_on(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(Fail(429, "slow down", retry_after_s=0.01), Reply(tool_calls=[submit()]))
    result = await run(server, max_retries=2)
    assert result.stop_reason is StopReason.SUBMITTED
    assert len(server.chat_requests) == 2
    # Retried by agent.model_retries (each retry reported), not inside the SDK.
    assert [r.headers.get("x-stainless-retry-count") for r in server.chat_requests] == ["0", "0"]


async def test_an_endpoint_that_keeps_failing_ends_the_run_in_bounded_time(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(*[Fail(500, "overloaded", retry_after_s=0.01)] * 3)
    started = time.monotonic()
    result = await run(server, max_retries=2)
    assert time.monotonic() - started < 10
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "HTTP 500" in (result.error or "") and "overloaded" in (result.error or "")
    assert len(server.chat_requests) == 3


async def test_a_rejected_request_is_not_retried(server: ScriptedOpenAIServer) -> None:
    server.add(Fail(401, "invalid api key"))
    result = await run(server, max_retries=2)
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert result.error == "the model endpoint answered HTTP 401: invalid api key"
    assert len(server.chat_requests) == 1


async def test_an_unreachable_endpoint_is_a_model_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = AgentConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    model = openai_model(config)
    result = await run_agent(TASK, FakeSandbox(), model, config)
    await model.aclose()
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "cannot reach the model endpoint" in (result.error or "")


async def test_a_hanging_endpoint_times_out_as_a_model_error(server: ScriptedOpenAIServer) -> None:
    server.add(Hang())
    started = time.monotonic()
    result = await run(server, request_timeout_s=0.3)
    assert time.monotonic() - started < 10
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert "timed out" in (result.error or "")


async def test_context_overflow_shrinks_max_tokens_then_stops(
    server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    server.add(
        context_length_failure(window=4096, prompt_tokens=3000, requested=2000),
        context_length_failure(window=4096, prompt_tokens=3950, requested=1032),
    )
    with TrajectoryWriter(tmp_path / "t.jsonl") as trajectory:
        result = await run(
            server, trajectory=trajectory, max_tokens=2000, min_completion_tokens=256, max_retries=2
        )
    assert result.stop_reason is StopReason.CONTEXT_EXCEEDED
    assert "maximum context length is 4096 tokens" in (result.error or "")
    assert [r.body["max_tokens"] for r in server.chat_requests] == [2000, 4096 - 3000 - 64]
    notice = next(r for r in read_trajectory(tmp_path / "t.jsonl") if r["kind"] == "notice")
    assert (notice["event"], notice["old"], notice["new"]) == ("max_tokens_reduced", 2000, 1032)


async def test_the_turn_limit_is_announced_then_enforced() -> None:
    async with ScriptedOpenAIServer(
        responder=lambda request: Reply(tool_calls=[bash("ls")])
    ) as server:
        result = await run(server, max_turns=4, remaining_turns_notice=2)
    assert result.stop_reason is StopReason.MAX_TURNS
    assert result.turns == 4
    assert len(server.chat_requests) == 4
    lasts = [messages(server, i)[-1]["content"] for i in range(4)]
    assert "Steps remaining" not in lasts[1]
    assert lasts[2].endswith("\nSteps remaining: 2")
    assert "Steps remaining: 1. This is your last step" in lasts[3]
    assert "call `submit` now" in lasts[3]


async def test_usage_is_summed_across_turns(server: ScriptedOpenAIServer) -> None:
    server.add(
        Reply(tool_calls=[bash("a")], prompt_tokens=1200, completion_tokens=30),
        Reply(text="thinking"),  # no tool call: still a turn that used tokens
        Reply(tool_calls=[submit()], prompt_tokens=1500, completion_tokens=12),
    )
    result = await run(server)
    assert (result.prompt_tokens, result.completion_tokens) == (1200 + 10 + 1500, 30 + 5 + 12)


async def test_cancelling_a_run_mid_request_records_it_and_propagates(
    server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    server.add(Reply(tool_calls=[bash("ls")]), Hang())
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as trajectory:
        running = asyncio.create_task(run(server, trajectory=trajectory))
        await server.wait_for_requests(2)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    result = list(read_trajectory(path))[-1]
    assert result["kind"] == "result"
    assert result["stop_reason"] == "cancelled"
    assert result["turns"] == 2


async def test_the_trajectory_is_written_as_the_run_goes(
    server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    release = asyncio.Event()
    server.add(
        Reply(
            text="compute",
            tool_calls=[bash("echo 42 > output/answer.txt")],
            reasoning="6*7=42",
            prompt_tokens=100,
            completion_tokens=20,
        ),
        Hang(release=release, then=Reply(tool_calls=[submit()], prompt_tokens=130)),
    )
    path = tmp_path / "run" / "trajectory.jsonl"
    with TrajectoryWriter(path) as trajectory:
        running = asyncio.create_task(run(server, trajectory=trajectory))
        await server.wait_for_requests(2)
        paused = list(read_trajectory(path))  # the second model call is still in flight
        release.set()
        result = await running
    assert [r["kind"] for r in paused] == [
        "meta", "message", "message", "message", "usage", "tool_call", "observation",
    ]  # fmt: skip
    meta, system, user, assistant, usage, call, observation = paused
    assert meta["task_id"] == "math-1" and meta["model"] == "scripted-model"
    assert meta["tools"] == ["str_replace_editor", "execute_bash", "submit"]
    assert meta["paths"]["answer_file"] == "/testbed/output/answer.txt"
    assert (system["role"], user["role"]) == ("system", "user")
    assert assistant == {
        "kind": "message", "turn": 1, "role": "assistant", "content": "compute",
        "reasoning": "6*7=42", "finish_reason": "tool_calls",
        "tool_calls": [{"call_id": call["call_id"], "name": "execute_bash",
                        "arguments": call["arguments"]}],
    }  # fmt: skip
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (100, 20)
    assert usage["model_s"] > 0
    assert call["name"] == "execute_bash"
    assert call["arguments"] == json.dumps({"command": "echo 42 > output/answer.txt"})
    assert observation["call_id"] == call["call_id"]
    assert observation["output"].startswith("Exit code: 0")

    records = list(read_trajectory(path))
    assert [r["kind"] for r in records[len(paused) :]] == [
        "message", "usage", "tool_call", "observation", "result",
    ]  # fmt: skip
    final = records[-1]
    assert final["stop_reason"] == "submitted"
    assert final["answer"] == "42"
    assert (final["prompt_tokens"], final["completion_tokens"]) == (230, 25)
    assert final["trajectory_path"] == str(path)
    assert result.trajectory_path == path


async def test_runs_share_the_endpoint_concurrency_limit(server: ScriptedOpenAIServer) -> None:
    server.add(*[Reply(tool_calls=[submit()], delay_s=0.05) for _ in range(6)])
    config = config_for(server, endpoint_concurrency=2)
    model = openai_model(config)
    tasks = [Task(id=f"t{i}", prompt="p") for i in range(6)]
    results = await asyncio.gather(*(run_agent(t, FakeSandbox(), model, config) for t in tasks))
    await model.aclose()
    assert all(r.stop_reason is StopReason.SUBMITTED for r in results)
    assert server.max_in_flight == 2
