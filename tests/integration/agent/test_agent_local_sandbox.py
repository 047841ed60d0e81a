"""End to end: the scripted endpoint drives a REAL local sandbox through the agent loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet import Sandbox
from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    StopReason,
    Task,
    ToolCalled,
    TrajectoryWriter,
    openai_model,
    read_trajectory,
    run_agent,
)
from tests.support.scripted_openai import Reply, ScriptedCall, ScriptedOpenAIServer, bash, submit

pytestmark = pytest.mark.integration

SOLVER = """\
from pathlib import Path

limit = int(Path("{input_dir}/limit.txt").read_text())
sieve = [True] * limit
sieve[0:2] = [False, False]
for n in range(2, int(limit ** 0.5) + 1):
    if sieve[n]:
        sieve[n * n :: n] = [False] * len(sieve[n * n :: n])
print(sum(n for n, is_prime in enumerate(sieve) if is_prime))
"""


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox.local() as local:
        yield local


async def test_a_maths_task_is_solved_by_writing_and_running_a_script(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    paths = sandbox.paths
    solver = f"{paths.working_dir}/solve.py"
    script = [
        Reply(
            text="I will compute the sum with a sieve instead of by hand.",
            tool_calls=[
                ScriptedCall(
                    "str_replace_editor",
                    {
                        "command": "create",
                        "path": solver,
                        "file_text": SOLVER.format(input_dir=paths.input_dir),
                    },
                )
            ],
        ),
        Reply(
            tool_calls=[
                bash(
                    f"mkdir -p {paths.output_dir} && cd {paths.working_dir} && "
                    f"python3 solve.py | tee {paths.answer_file}"
                )
            ]
        ),
        Reply(text="The sum is 76127.", tool_calls=[submit()]),
    ]
    task = Task(
        id="primes",
        prompt="What is the sum of the primes below the number in limit.txt?",
        files={"limit.txt": b"1000\n"},
    )
    trajectory_path = tmp_path / "trajectory.jsonl"
    async with ScriptedOpenAIServer(script) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_retries=0)
        model = openai_model(config)
        with TrajectoryWriter(trajectory_path) as trajectory:
            result = await run_agent(task, sandbox, model, config, trajectory=trajectory)
        await model.aclose()

    assert result.stop_reason is StopReason.SUBMITTED, result.error
    assert result.answer == "76127"
    assert result.output_files == [paths.answer_file]
    assert result.turns == 3
    assert result.tool_time_s > 0

    # The model saw real observations from the sandbox's tools.
    created = server.chat_requests[1].body["messages"][-1]
    assert created["role"] == "tool"
    assert solver in created["content"]
    ran = server.chat_requests[2].body["messages"][-1]["content"]
    assert ran.startswith("Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n76127")

    observations = [r for r in read_trajectory(trajectory_path) if r["kind"] == "observation"]
    assert [o["name"] for o in observations] == ["str_replace_editor", "execute_bash", "submit"]
    assert "\n76127" in observations[1]["output"]


async def test_sandbox_errors_reach_the_model_as_observations(sandbox: Sandbox) -> None:
    missing = f"{sandbox.paths.working_dir}/does-not-exist.py"
    script = [
        Reply(
            tool_calls=[ScriptedCall("str_replace_editor", {"command": "view", "path": missing})]
        ),
        Reply(tool_calls=[bash("exit_code_test() { return 3; }; exit_code_test")]),
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_retries=0)
        model = openai_model(config)
        result = await run_agent(Task(id="errors", prompt="p"), sandbox, model, config)
        await model.aclose()
    assert result.stop_reason is StopReason.SUBMITTED
    view_error = server.chat_requests[1].body["messages"][-1]["content"]
    assert view_error.startswith("Execution output of \\[str_replace_editor]:\nError:")
    assert missing in view_error
    exit_three = server.chat_requests[2].body["messages"][-1]["content"]
    assert exit_three.startswith("Exit code: Error: Exit code 3")


async def test_cancelling_during_a_long_command_ends_promptly(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[bash("sleep 60")])]
    tool_running = asyncio.Event()

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, ToolCalled):
            tool_running.set()

    path = tmp_path / "trajectory.jsonl"
    started = time.monotonic()
    async with ScriptedOpenAIServer(script) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_retries=0)
        model = openai_model(config)
        with TrajectoryWriter(path) as trajectory:
            async with Sandbox.local() as sandbox:
                running = asyncio.create_task(
                    run_agent(
                        Task(id="slow", prompt="p"), sandbox, model, config,
                        trajectory=trajectory, on_event=on_event,
                    )
                )  # fmt: skip
                await tool_running.wait()
                running.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await running
        await model.aclose()
    assert time.monotonic() - started < 30
    records = list(read_trajectory(path))
    assert records[-2]["kind"] == "tool_call"
    assert records[-1]["kind"] == "result"
    assert records[-1]["stop_reason"] == "cancelled"
