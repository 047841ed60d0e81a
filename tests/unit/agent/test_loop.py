"""The agent loop against an in-process scripted model and an in-memory sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    ContextLengthExceededError,
    ModelError,
    ModelReplied,
    ObservationReceived,
    RunFinished,
    StopReason,
    Task,
    ToolCalled,
    TrajectoryWriter,
    TurnStarted,
    read_trajectory,
    run_agent,
)
from sandfleet.agent.loop import AgentLoop
from tests.support.agent_fakes import FakeSandbox, ScriptedModel, turn

CONFIG = AgentConfig(model="scripted", max_turns=10)
TASK = Task(id="t1", prompt="What is 6*7?")
BASH = "execute_bash"


async def test_submit_ends_the_run_with_the_answer_file_content() -> None:
    model = ScriptedModel(
        [
            turn("I will write it", (BASH, {"command": "echo 42 > output/answer.txt"})),
            turn("done", ("submit", {})),
        ]
    )
    sandbox = FakeSandbox()
    result = await run_agent(TASK, sandbox, model, CONFIG)
    assert result.stop_reason is StopReason.SUBMITTED
    assert result.answer == "42"
    assert result.answer_from_file is True
    assert result.output_files == ["/testbed/output/answer.txt"]
    assert result.turns == 2
    assert result.error is None


async def test_without_an_answer_file_the_answer_is_the_last_text() -> None:
    model = ScriptedModel(
        [turn("The answer is 42.", (BASH, {"command": "true"})), turn("", ("submit", {}))]
    )
    result = await run_agent(TASK, FakeSandbox(), model, CONFIG)
    assert result.answer == "The answer is 42."
    assert result.answer_from_file is False  # a benchmark scores no answer here
    assert result.output_files == []


async def test_tool_calls_of_one_reply_run_in_order_and_each_gets_its_message() -> None:
    model = ScriptedModel(
        [
            turn(
                "",
                (BASH, {"command": "one"}),
                (BASH, {"command": "two"}),
                (BASH, {"command": "three"}),
            ),
            turn("", ("submit", {})),
        ]
    )
    sandbox = FakeSandbox()
    await run_agent(TASK, sandbox, model, CONFIG)
    assert [args["command"] for _, args in sandbox.tool_calls] == ["one", "two", "three"]
    tool_messages = [m for m in model.transcript if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1", "call_2"]
    assert [m["content"].rsplit("\n", 2)[-2] for m in tool_messages] == ["one", "two", "three"]


async def test_calls_after_submit_in_the_same_reply_are_not_run() -> None:
    model = ScriptedModel(
        [turn("", (BASH, {"command": "before"}), ("submit", {}), (BASH, {"command": "after"}))]
    )
    sandbox = FakeSandbox()
    result = await run_agent(TASK, sandbox, model, CONFIG)
    assert result.stop_reason is StopReason.SUBMITTED
    assert [args["command"] for _, args in sandbox.tool_calls] == ["before"]


async def test_a_reply_without_a_tool_call_gets_a_nudge_and_uses_a_turn() -> None:
    model = ScriptedModel([turn("Let me think."), turn("", ("submit", {}))])
    result = await run_agent(TASK, FakeSandbox(), model, CONFIG)
    assert result.turns == 2
    nudge = model.calls[1].last_item
    assert nudge["role"] == "user"
    assert "did not call any tool" in nudge["content"]


async def test_bad_calls_become_observations_and_the_loop_goes_on() -> None:
    model = ScriptedModel(
        [
            turn("", (BASH, '{"command": ')),
            turn("", ("browse", {"url": "x"})),
            turn("", ("str_replace_editor", {"command": "view"})),
            turn("", ("submit", {})),
        ]
    )
    sandbox = FakeSandbox()
    result = await run_agent(TASK, sandbox, model, CONFIG)
    assert result.stop_reason is StopReason.SUBMITTED
    assert sandbox.tool_calls == []  # none of them reached the sandbox
    observations = [call.last_item["content"] for call in model.calls[1:]]
    assert "not valid JSON" in observations[0]
    assert observations[1] == "Unknown action: browse"
    assert "needs the parameter `path`" in observations[2]


async def test_max_turns_stops_the_run_and_warns_before_the_end() -> None:
    model = ScriptedModel([turn("", (BASH, {"command": "ls"}))], repeat_last=True)
    config = AgentConfig(model="m", max_turns=4, remaining_turns_notice=2)
    result = await run_agent(TASK, FakeSandbox(), model, config)
    assert result.stop_reason is StopReason.MAX_TURNS
    assert result.turns == 4
    seen = [call.last_item["content"] for call in model.calls]
    assert "Steps remaining" not in seen[1]
    assert seen[2].endswith("\nSteps remaining: 2")
    assert "Steps remaining: 1. This is your last step" in seen[3]


async def test_usage_is_summed_over_the_run() -> None:
    model = ScriptedModel(
        [
            turn("", (BASH, {"command": "a"}), prompt_tokens=100, completion_tokens=7),
            turn("", ("submit", {}), prompt_tokens=150, completion_tokens=3),
        ]
    )
    result = await run_agent(TASK, FakeSandbox(), model, CONFIG)
    assert (result.prompt_tokens, result.completion_tokens) == (250, 10)


async def test_a_model_error_ends_the_run_with_its_message() -> None:
    model = ScriptedModel(
        [turn("", (BASH, {"command": "a"})), ModelError("HTTP 401: bad key", status_code=401)]
    )
    result = await run_agent(TASK, FakeSandbox(), model, CONFIG)
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert result.error == "HTTP 401: bad key"
    assert result.turns == 2


async def test_context_overflow_shrinks_max_tokens_before_giving_up(tmp_path: Path) -> None:
    overflow = ContextLengthExceededError("too long")  # sizes unknown: halve each time
    model = ScriptedModel([overflow, overflow, overflow])
    config = AgentConfig(model="m", max_tokens=8000, min_completion_tokens=1500, context_retries=5)
    with TrajectoryWriter(tmp_path / "t.jsonl") as trajectory:
        result = await run_agent(TASK, FakeSandbox(), model, config, trajectory=trajectory)
    assert result.stop_reason is StopReason.CONTEXT_EXCEEDED
    assert [call.max_tokens for call in model.calls] == [8000, 4000, 2000]
    notices = [r for r in read_trajectory(tmp_path / "t.jsonl") if r["kind"] == "notice"]
    assert [(n["old"], n["new"]) for n in notices] == [(8000, 4000), (4000, 2000)]


async def test_a_shrunk_budget_stays_shrunk_for_later_turns() -> None:
    overflow = ContextLengthExceededError("too long", context_window=4096, prompt_tokens=1000)
    model = ScriptedModel([overflow, turn("", (BASH, {"command": "a"})), turn("", ("submit", {}))])
    config = AgentConfig(model="m", max_tokens=4000, min_completion_tokens=512)
    result = await run_agent(TASK, FakeSandbox(), model, config)
    assert result.stop_reason is StopReason.SUBMITTED
    assert [call.max_tokens for call in model.calls] == [4000, 3032, 3032]
    assert result.turns == 2


async def test_a_lost_sandbox_ends_the_run() -> None:
    model = ScriptedModel([turn("", (BASH, {"command": "a"})), turn("", (BASH, {"command": "b"}))])
    result = await run_agent(TASK, FakeSandbox(lose_after_calls=1), model, CONFIG)
    assert result.stop_reason is StopReason.SANDBOX_LOST
    assert "unreachable" in (result.error or "")
    assert result.output_files == []


async def test_task_files_go_below_the_input_dir_or_where_absolute() -> None:
    sandbox = FakeSandbox()
    task = Task(id="t", prompt="p", files={"data/a.csv": b"1,2", "/tmp/b.txt": b"b"})
    await run_agent(task, sandbox, ScriptedModel([turn("", ("submit", {}))]), CONFIG)
    assert sandbox.files == {"/testbed/input/data/a.csv": b"1,2", "/tmp/b.txt": b"b"}


async def test_templates_from_the_task_win_over_the_config() -> None:
    model = ScriptedModel([turn("", ("submit", {}))])
    config = AgentConfig(
        model="m", system_prompt="config system", instance_prompt="config: {problem_statement}"
    )
    task = Task(id="t", prompt="p", instance_prompt="task: {problem_statement} -> {answer_file}")
    await run_agent(task, FakeSandbox(), model, config)
    assert [m["content"] for m in model.transcript[:2]] == [
        "config system",
        "task: p -> /testbed/output/answer.txt",
    ]


async def test_events_report_the_run_as_it_happens() -> None:
    events: list[AgentEvent] = []
    model = ScriptedModel([turn("hi", (BASH, {"command": "ls -la"})), turn("", ("submit", {}))])
    await run_agent(TASK, FakeSandbox(), model, CONFIG, on_event=events.append)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "TurnStarted", "ModelReplied", "ToolCalled", "ObservationReceived",
        "TurnStarted", "ModelReplied", "ToolCalled", "ObservationReceived", "RunFinished",
    ]  # fmt: skip
    assert isinstance(events[0], TurnStarted) and events[0].max_turns == 10
    assert isinstance(events[1], ModelReplied) and events[1].text == "hi"
    assert isinstance(events[2], ToolCalled) and events[2].arguments == "ls -la"
    assert isinstance(events[3], ObservationReceived) and events[3].name == BASH
    assert isinstance(events[-1], RunFinished)
    assert events[-1].result.stop_reason is StopReason.SUBMITTED


async def test_cancellation_records_a_cancelled_result_and_propagates(tmp_path: Path) -> None:
    model = ScriptedModel(
        [turn("", (BASH, {"command": "a"})), turn("", ("submit", {}))], hold_call=2
    )
    events: list[AgentEvent] = []
    with TrajectoryWriter(tmp_path / "t.jsonl") as trajectory:
        loop = AgentLoop(
            TASK, FakeSandbox(), model, CONFIG, trajectory=trajectory, on_event=events.append
        )
        running = asyncio.create_task(loop.run())
        await model.waiting.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert loop.result is not None
    assert loop.result.stop_reason is StopReason.CANCELLED
    assert isinstance(events[-1], RunFinished)
    assert events[-1].result.stop_reason is StopReason.CANCELLED
    records = list(read_trajectory(tmp_path / "t.jsonl"))
    assert records[-1]["kind"] == "result"
    assert records[-1]["stop_reason"] == "cancelled"


async def test_records_are_on_disk_while_a_turn_is_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    model = ScriptedModel(
        [turn("first", (BASH, {"command": "a"})), turn("", ("submit", {}))], hold_call=2
    )
    with TrajectoryWriter(path) as trajectory:
        running = asyncio.create_task(
            run_agent(TASK, FakeSandbox(), model, CONFIG, trajectory=trajectory)
        )
        # The second model call is held: read the file from outside the paused run.
        await model.waiting.wait()
        kinds = [r["kind"] for r in read_trajectory(path)]
        model.release.set()
        result = await running
    assert kinds == ["meta", "message", "message", "message", "usage", "tool_call", "observation"]
    assert result.stop_reason is StopReason.SUBMITTED


async def test_timings_split_model_and_tool_time() -> None:
    async def slow_tool(sandbox: FakeSandbox, name: str, arguments: object) -> str:
        await asyncio.sleep(0.03)  # simulated tool latency, not a wait for state
        return "ok"

    class SlowModel(ScriptedModel):
        async def complete(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.02)  # simulated model latency
            return await super().complete(*args, **kwargs)  # type: ignore[arg-type]

    model = SlowModel([turn("", (BASH, {"command": "a"})), turn("", ("submit", {}))])
    result = await run_agent(TASK, FakeSandbox(slow_tool), model, CONFIG)
    first = result.turn_timings[0]
    assert first.model_s >= 0.02
    assert first.tool_s >= 0.03
    assert result.model_time_s >= 0.04
    assert result.tool_time_s >= 0.03
    assert result.wall_time_s >= result.model_time_s + result.tool_time_s
