"""The loop suspending and resuming, against an in-process scripted model and sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    RunFinished,
    StopReason,
    Task,
    TrajectoryWriter,
    TurnStarted,
    read_trajectory,
)
from sandfleet.agent.loop import AgentLoop
from sandfleet.agent.resume import (
    ResumeError,
    ResumeState,
    mend_torn_tail,
    resume_agent,
    resume_state,
)
from tests.support.agent_fakes import FakeSandbox, ScriptedModel, turn

CONFIG = AgentConfig(model="scripted", max_turns=10)
TASK = Task(id="t1", prompt="What is 6*7?", files={"in.txt": b"6 7\n"})
BASH = "execute_bash"
INPUT = "/testbed/input/in.txt"


async def suspended_run(path: Path, events: list[AgentEvent]) -> AgentLoop:
    """Two finished turns, then a suspension while the third model call is in flight."""
    model = ScriptedModel(
        [
            turn("look", (BASH, {"command": "ls"}), prompt_tokens=100, completion_tokens=7),
            turn("", (BASH, {"command": "pwd"}), prompt_tokens=200, completion_tokens=9),
        ],
        hold_call=3,
    )
    with TrajectoryWriter(path) as trajectory:
        loop = AgentLoop(
            TASK, FakeSandbox(), model, CONFIG, trajectory=trajectory, on_event=events.append
        )
        running = asyncio.create_task(loop.run())
        await model.waiting.wait()
        loop.suspend_on_cancel()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    return loop


def state_of(path: Path) -> ResumeState:
    state = resume_state(read_trajectory(path))
    assert state is not None
    return state


async def test_a_suspended_run_records_no_result_and_reports_no_end(tmp_path: Path) -> None:
    events: list[AgentEvent] = []
    loop = await suspended_run(tmp_path / "t.jsonl", events)
    assert loop.result is None
    assert not any(isinstance(e, RunFinished) for e in events)
    records = list(read_trajectory(tmp_path / "t.jsonl"))
    assert records[-1] == {"kind": "notice", "turn": 3, "event": "suspended"}
    assert not any(r["kind"] == "result" for r in records)


async def test_a_resumed_run_goes_on_from_the_next_turn_without_uploading_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    state = state_of(path)
    model = ScriptedModel(
        [
            turn("", (BASH, {"command": "echo 42 > output/answer.txt"}), prompt_tokens=300),
            turn("done", ("submit", {}), prompt_tokens=400, completion_tokens=1),
        ]
    )
    sandbox = FakeSandbox()
    events: list[AgentEvent] = []
    with TrajectoryWriter(path) as trajectory:
        result = await resume_agent(
            TASK, sandbox, model, CONFIG, state, trajectory=trajectory, on_event=events.append
        )
    assert result.stop_reason is StopReason.SUBMITTED
    assert result.answer == "42"
    assert [e.turn for e in events if isinstance(e, TurnStarted)] == [3, 4]
    assert (result.turns, result.prompt_tokens, result.completion_tokens) == (
        4,
        1000,
        7 + 9 + 5 + 1,
    )
    assert [t.turn for t in result.turn_timings] == [1, 2, 3, 4]
    assert INPUT not in sandbox.files
    assert model.calls[0].transcript_length == 6  # system, user, two replies with one call each
    records = list(read_trajectory(path))
    assert sum(r["kind"] == "meta" for r in records) == 1
    assert sum(r["kind"] == "result" for r in records) == 1
    assert records[-1]["turns"] == 4


async def test_a_run_that_had_submitted_only_collects_its_outputs(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    model = ScriptedModel([turn("done", ("submit", {}))])
    with TrajectoryWriter(path) as trajectory:
        await AgentLoop(TASK, FakeSandbox(), model, CONFIG, trajectory=trajectory).run()
    records = [r for r in read_trajectory(path) if r["kind"] not in ("observation", "result")]
    state = resume_state(records)  # as if the crash came right after the submit call
    assert state is not None and state.submitted
    sandbox = FakeSandbox()
    sandbox.files["/testbed/output/answer.txt"] = b"42\n"
    later = ScriptedModel([])
    result = await resume_agent(TASK, sandbox, later, CONFIG, state)
    assert result.stop_reason is StopReason.SUBMITTED
    assert (result.answer, result.turns) == ("42", 1)
    assert later.calls == []


async def test_a_spent_turn_budget_ends_the_resumed_run_at_once(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    later = ScriptedModel([])
    config = AgentConfig(model="scripted", max_turns=2)
    result = await resume_agent(TASK, FakeSandbox(), later, config, state_of(path))
    assert result.stop_reason is StopReason.MAX_TURNS
    assert result.turns == 2
    assert later.calls == []


async def test_a_reduced_completion_budget_stays_reduced_after_resuming(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    with TrajectoryWriter(path) as trajectory:
        trajectory.write(
            {"kind": "notice", "turn": 3, "event": "max_tokens_reduced", "old": 4096, "new": 1500}
        )
    later = ScriptedModel([turn("", ("submit", {}))])
    config = AgentConfig(model="scripted", max_turns=10, max_tokens=4096)
    await resume_agent(TASK, FakeSandbox(), later, config, state_of(path))
    assert later.calls[0].max_tokens == 1500


async def test_a_run_stopped_before_its_prompts_starts_them_without_a_second_meta(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    meta = next(read_trajectory(path))
    path.write_text(json.dumps(meta) + "\n")  # what a crash right after the meta record leaves
    state = state_of(path)
    sandbox = FakeSandbox()
    later = ScriptedModel([turn("", ("submit", {}))])
    with TrajectoryWriter(path) as trajectory:
        result = await resume_agent(TASK, sandbox, later, CONFIG, state, trajectory=trajectory)
    assert result.turns == 1
    assert sandbox.files[INPUT] == b"6 7\n"
    kinds = [r["kind"] for r in read_trajectory(path)]
    assert kinds[:4] == ["meta", "notice", "message", "message"]
    assert kinds.count("meta") == 1


async def test_a_state_of_another_task_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    other = Task(id="t2", prompt="p")
    with pytest.raises(ResumeError, match="of task 't1', not 't2'"):
        await resume_agent(other, FakeSandbox(), ScriptedModel([]), CONFIG, state_of(path))


async def test_records_appended_after_a_torn_last_line_start_on_their_own_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    await suspended_run(path, [])
    with path.open("a") as handle:
        handle.write('{"kind": "message", "turn": 3, "role": "assi')  # the crash cut it here
    state = state_of(path)
    with TrajectoryWriter(path) as trajectory:
        await resume_agent(
            TASK, FakeSandbox(), ScriptedModel([turn("", ("submit", {}))]), CONFIG, state,
            trajectory=trajectory,
        )  # fmt: skip
    records = list(read_trajectory(path))  # raises if the torn line were still in the middle
    assert [r.get("event") for r in records if r["kind"] == "notice"] == ["suspended", "resumed"]
    assert records[-1]["kind"] == "result" and records[-1]["turns"] == 3


@pytest.mark.parametrize(
    ("content", "mended"),
    [
        (b"", b""),
        (b'{"a": 1}\n', b'{"a": 1}\n'),
        (b'{"a": 1}\n{"b": 2}', b'{"a": 1}\n{"b": 2}\n'),  # only the newline was missing
        (b'{"a": 1}\n{"b": ', b'{"a": 1}\n'),
        (b'{"a": 1}\n[1, 2]', b'{"a": 1}\n'),  # not a record: read_trajectory skips it too
        (b'{"b": "' + b"x" * 200_000, b""),  # a torn line longer than one read
        (b'{"a": 1}\n{"b": "' + "é".encode() * 100_000, b'{"a": 1}\n'),
    ],
    ids=["empty", "whole", "no newline", "cut", "not an object", "long", "long after a line"],
)
def test_a_torn_tail_is_cut_or_ended_like_read_trajectory_reads_it(
    tmp_path: Path, content: bytes, mended: bytes
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    mend_torn_tail(path)
    assert path.read_bytes() == mended
