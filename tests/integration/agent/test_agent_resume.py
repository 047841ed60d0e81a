"""A controller restart mid-run, end to end: the first loop stops after some turns, a second
one (new model client, new endpoint, new runtime client) continues from the trajectory in
the same REAL local sandbox, whose bash state survived."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from sandfleet import Opening, Sandbox
from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    AgentResult,
    StopReason,
    Task,
    ToolCalled,
    TrajectoryWriter,
    TurnStarted,
    openai_model,
    read_trajectory,
)
from sandfleet.agent.loop import AgentLoop
from sandfleet.agent.resume import (
    LOST_RESULT_OBSERVATION,
    ResumeError,
    ResumeState,
    finished_result,
    load_resume_state,
    resume_agent,
    resume_state,
)
from sandfleet.backends.local import LocalRuntime, LocalSandboxConfig, launch_local_runtime
from tests.support.scripted_openai import Hang, Reply, ScriptedOpenAIServer, Step, bash, submit

pytestmark = pytest.mark.integration

TASK = Task(id="resume-1", prompt="What is 41+1?", files={"n.txt": b"41\n"})


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[LocalRuntime]:
    launched = await launch_local_runtime(LocalSandboxConfig(state_dir=tmp_path / "state"))
    try:
        yield launched
    finally:
        await launched.close()


def attach(runtime: LocalRuntime) -> Opening[Sandbox]:
    """A fresh client of the running sandbox, as a (restarted) operator builds from the pod."""
    return Sandbox.connect(runtime.address, runtime.token, paths=runtime.paths)


def config_for(server: ScriptedOpenAIServer) -> AgentConfig:
    return AgentConfig(model="scripted", base_url=server.base_url, max_retries=0, max_turns=8)


async def interrupted_run(
    runtime: LocalRuntime,
    path: Path,
    script: list[Step],
    *,
    stop_when: Callable[[ScriptedOpenAIServer, asyncio.Event], Awaitable[None]],
    suspend: bool = True,
) -> ScriptedOpenAIServer:
    """Run TASK until `stop_when(server, tool_called)` returns (`tool_called` is an Event set
    when a tool call starts), then cancel it, suspending the run first unless told not to.
    Returns the (closed) first endpoint with its requests."""
    tool_called = asyncio.Event()

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, ToolCalled):
            tool_called.set()

    async with ScriptedOpenAIServer(script) as server:
        config = config_for(server)
        model = openai_model(config)
        sandbox = await attach(runtime)
        with TrajectoryWriter(path) as trajectory:
            loop = AgentLoop(TASK, sandbox, model, config, trajectory=trajectory, on_event=on_event)
            running = asyncio.create_task(loop.run())
            async with asyncio.timeout(30):
                await stop_when(server, tool_called)
            if suspend:
                loop.suspend_on_cancel()
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        await sandbox.close()
        await model.aclose()
    return server


async def resumed_run(
    runtime: LocalRuntime, path: Path, state: ResumeState, script: list[Step]
) -> tuple[ScriptedOpenAIServer, AgentResult, list[AgentEvent]]:
    events: list[AgentEvent] = []
    async with ScriptedOpenAIServer(script) as server:
        config = config_for(server)
        model = openai_model(config)
        sandbox = await attach(runtime)
        with TrajectoryWriter(path) as trajectory:
            result = await resume_agent(
                TASK, sandbox, model, config, state, trajectory=trajectory, on_event=events.append
            )
        await sandbox.close()
        await model.aclose()
    return server, result, events


async def third_request(server: ScriptedOpenAIServer, tool_called: asyncio.Event) -> None:
    await server.wait_for_requests(3)


async def second_request(server: ScriptedOpenAIServer, tool_called: asyncio.Event) -> None:
    await server.wait_for_requests(2)


async def test_a_run_cut_after_two_turns_is_continued_by_a_second_loop(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "trajectory.jsonl"
    first = await interrupted_run(
        runtime,
        path,
        [
            Reply(
                text="Remember n.",
                tool_calls=[bash("export N=$(cat input/n.txt)")],
                prompt_tokens=100,
                completion_tokens=10,
            ),
            Reply(
                tool_calls=[bash("echo changed > input/n.txt; echo $N")],
                prompt_tokens=200,
                completion_tokens=20,
            ),
            Hang(),  # turn 3 is in flight when the controller goes away
        ],
        stop_when=third_request,
    )
    state = resume_state(read_trajectory(path))
    assert state is not None and state.turns == 2

    second, result, events = await resumed_run(
        runtime,
        path,
        state,
        [
            Reply(
                tool_calls=[bash("cat input/n.txt; echo $((N+1)) > output/answer.txt")],
                prompt_tokens=300,
                completion_tokens=30,
            ),
            Reply(text="42", tool_calls=[submit()], prompt_tokens=400, completion_tokens=40),
        ],
    )

    # The model sees exactly the conversation the interrupted turn 3 had sent.
    interrupted = first.chat_requests[2].body["messages"]
    assert [m["role"] for m in interrupted] == [
        "system", "user", "assistant", "tool", "assistant", "tool",
    ]  # fmt: skip
    assert second.chat_requests[0].body["messages"] == interrupted
    assert second.chat_requests[0].body["tools"] == first.chat_requests[0].body["tools"]
    # The shell kept N; the input file was not uploaded again over the model's change.
    ran = second.chat_requests[1].body["messages"][-1]["content"]
    assert "changed" in ran and "41" not in ran
    assert result.stop_reason is StopReason.SUBMITTED, result.error
    assert result.answer == "42"
    assert [e.turn for e in events if isinstance(e, TurnStarted)] == [3, 4]
    assert result.turns == 4
    assert (result.prompt_tokens, result.completion_tokens) == (1000, 100)
    assert [t.turn for t in result.turn_timings] == [1, 2, 3, 4]

    records = list(read_trajectory(path))
    kinds = [r["kind"] for r in records]
    assert kinds.count("meta") == 1 and kinds[0] == "meta"
    assert kinds.count("result") == 1 and kinds[-1] == "result"
    notices = [(r["event"], r["turn"]) for r in records if r["kind"] == "notice"]
    assert notices == [("suspended", 3), ("resumed", 3)]
    replies = [r["turn"] for r in records if r.get("role") == "assistant"]
    assert replies == [1, 2, 3, 4]
    assert records[-1]["stop_reason"] == "submitted" and records[-1]["turns"] == 4
    # Finished now: nothing left to resume, and the recorded result says how it ended.
    assert resume_state(records) is None
    assert finished_result(records) == records[-1]


async def test_a_call_cut_off_by_the_restart_is_reported_lost_not_run_again(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "trajectory.jsonl"
    marker = f"{runtime.paths.working_dir}/ran"

    async def the_call_ran(server: ScriptedOpenAIServer, tool_called: asyncio.Event) -> None:
        await tool_called.wait()
        async with attach(runtime) as probe:  # its own shell: the default one is busy
            while not (await probe.bash(f"cat {marker}", session="probe")).stdout:
                pass  # each probe is a round trip to the runtime; interrupted_run bounds it

    await interrupted_run(
        runtime,
        path,
        [Reply(tool_calls=[bash(f"echo once >> {marker}; sleep 30")])],
        stop_when=the_call_ran,
    )
    state = await load_resume_state(path)
    assert state is not None
    assert [c.name for c in state.lost_calls] == ["execute_bash"]

    second, result, _ = await resumed_run(
        runtime,
        path,
        state,
        [Reply(tool_calls=[bash(f"cat {marker}")]), Reply(tool_calls=[submit()])],
    )
    first_after = second.chat_requests[0].body["messages"]
    lost = first_after[-1]
    assert lost["role"] == "tool"
    assert lost["tool_call_id"] == first_after[-2]["tool_calls"][0]["id"]
    assert lost["content"] == LOST_RESULT_OBSERVATION
    ran = second.chat_requests[1].body["messages"][-1]["content"]
    assert ran.count("once") == 1  # the cut-off call was not run a second time
    assert result.stop_reason is StopReason.SUBMITTED
    assert result.turns == 3
    records = list(read_trajectory(path))
    observations = [r for r in records if r["kind"] == "observation" and r["turn"] == 1]
    assert len(observations) == 1 and observations[0]["lost"] is True


async def test_a_run_whose_shutdown_recorded_cancelled_can_still_be_carried_on(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "trajectory.jsonl"
    await interrupted_run(
        runtime,
        path,
        [Reply(tool_calls=[bash("true")]), Hang()],
        stop_when=second_request,
        suspend=False,
    )
    records = list(read_trajectory(path))
    assert resume_state(records) is None  # as recorded, the run ended: cancelled
    assert finished_result(records) == records[-1]
    assert records[-1]["stop_reason"] == "cancelled"
    state = await load_resume_state(path, carry_on_cancelled=True)  # its own shutdown: a pause
    assert state is not None and state.turns == 1
    _, result, _ = await resumed_run(runtime, path, state, [Reply(tool_calls=[submit()])])
    assert result.turns == 2
    records = list(read_trajectory(path))
    # The resumed notice supersedes the cancelled result: the run's outcome is the last one.
    assert finished_result(records) == records[-1]
    assert records[-1]["stop_reason"] == "submitted"
    assert resume_state(records) is None


async def test_a_garbled_trajectory_is_refused_with_the_reason(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "trajectory.jsonl"
    await interrupted_run(
        runtime, path, [Reply(tool_calls=[bash("true")]), Hang()],
        stop_when=second_request,
    )  # fmt: skip
    lines = path.read_text().splitlines(keepends=True)
    del lines[3]  # the first reply's record: its usage and call now belong to no reply
    path.write_text("".join(lines))
    with pytest.raises(ResumeError, match=r"garbled at record 4 \(usage\): turn 1 has no recorded"):
        await load_resume_state(path)
    path.write_text("")
    with pytest.raises(ResumeError, match="empty"):
        await load_resume_state(path)
