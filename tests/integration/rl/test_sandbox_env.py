"""SandboxEnv and SandboxEnvBatch on REAL local sandboxes: the loop's prompt and tool
contract, reset between episodes, submit and reward, truncation, a dying sandbox, a batch
whose failures stay per environment, and the blocking facade."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from sandfleet import Sandbox
from sandfleet.agent import AgentConfig, Task, openai_model, run_agent
from sandfleet.agent.tools import execute_tool_call
from sandfleet.rl import (
    EnvConfig,
    EpisodeNotStartedError,
    Observation,
    ResetFailure,
    SandboxEnv,
    SandboxEnvBatch,
    SyncSandboxEnvBatch,
)
from sandfleet.sandbox.core import SandboxCore
from sandfleet.tool_calls import ToolCall
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, submit

pytestmark = pytest.mark.integration

TASK = Task(id="t1", prompt="Count the lines of input/a.txt.", files={"a.txt": b"1\n2\n3\n"})


def bash(command: str, call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id, "execute_bash", json.dumps({"command": command}))


def submit_call() -> ToolCall:
    return ToolCall("s1", "submit", "{}")


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox.local() as local:
        yield local


async def test_the_first_observation_is_the_prompt_and_tools_the_agent_loop_sends(
    sandbox: Sandbox,
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[submit()])]) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_retries=0)
        model = openai_model(config)
        try:
            await run_agent(TASK, sandbox, model, config)
        finally:
            await model.aclose()
        sent = server.chat_requests[0].body
    observation = await SandboxEnv(sandbox).reset(TASK)
    assert observation.messages == sent["messages"]
    assert observation.tools == sent["tools"]
    assert [t["function"]["name"] for t in observation.tools] == [
        "str_replace_editor", "execute_bash", "submit",
    ]  # fmt: skip


async def test_a_malformed_call_gets_the_loops_message_and_does_not_end_the_episode(
    sandbox: Sandbox,
) -> None:
    env = SandboxEnv(sandbox)
    await env.reset(TASK)
    calls = [
        ToolCall("m1", "execute_bash", '{"command": "echo hi"'),  # truncated JSON
        ToolCall("m2", "run_python", "{}"),  # no such tool
        ToolCall("m3", "str_replace_editor", '{"command": "view"}'),  # no path
    ]
    for turn, call in enumerate(calls, 1):
        observation, done, info = await env.step(call)
        assert observation == await execute_tool_call(sandbox, call)
        assert (done, info.malformed, info.turn, info.tool) == (False, True, turn, call.name)
        assert not info.sandbox_lost
    observation, done, info = await env.step(
        {
            "id": "ok",
            "function": {"name": "execute_bash", "arguments": '{"command": "wc -l < input/a.txt"}'},
        }
    )
    assert (done, info.malformed, info.call_id) == (False, False, "ok")
    assert observation.startswith("Exit code: 0\n") and "\n3\n" in observation + "\n"


async def test_reset_leaves_no_process_file_or_variable_of_the_previous_episode(
    sandbox: Sandbox,
) -> None:
    env = SandboxEnv(sandbox)
    first = await env.reset(TASK)
    await env.step(bash("export EPISODE_VAR=leaked; echo x > stray.txt; mkdir -p output"))
    await env.step(
        bash("(setsid sleep 3071 >/dev/null 2>&1 &); nohup sleep 3072 >/dev/null 2>&1 &")
    )
    await env.step(bash("echo 42 > output/answer.txt"))
    before = await sandbox.bash("ps -eo args")
    assert "sleep 3071" in before.stdout and "sleep 3072" in before.stdout

    second_task = Task(id="t2", prompt="Another.", files={"b.txt": b"b\n"})
    second = await env.reset(second_task)
    assert second.episode_id != first.episode_id
    assert second.reset.killed_processes >= 2 and second.reset.removed_paths >= 2
    observation, _, _ = await env.step(
        bash("echo ${EPISODE_VAR:-unset}; ls -R; ps -eo args | grep -c '[s]leep 307' || true")
    )
    assert observation.split("\\[STDOUT]\n", 1)[1] == (
        "unset\n.:\ninput\noutput\n\n./input:\nb.txt\n\n./output:\n0\n"
    )


async def test_submit_ends_the_episode_with_the_answer_and_the_reward(sandbox: Sandbox) -> None:
    scored: list[tuple[str | None, SandboxCore]] = []

    async def reward(answer: str | None, scored_in: SandboxCore) -> float:
        scored.append((answer, scored_in))
        # The sandbox is still as the episode left it: the reward may look inside.
        lines = (await scored_in.bash("wc -l < input/a.txt")).stdout.strip()
        return 1.0 if answer == lines else 0.0

    env = SandboxEnv(sandbox, reward=reward)
    await env.reset(TASK)
    await env.step(bash("wc -l < input/a.txt > output/answer.txt"))
    observation, done, info = await env.step(submit_call())
    assert (observation, done) == ("Submitted.", True)
    assert (info.submitted, info.answer, info.reward, info.turn) == (True, "3", 1.0, 2)
    assert scored == [("3", sandbox)]
    with pytest.raises(EpisodeNotStartedError):
        await env.step(bash("true"))


async def test_the_step_that_reaches_max_turns_truncates_the_episode(sandbox: Sandbox) -> None:
    env = SandboxEnv(sandbox, EnvConfig(max_turns=2), reward=lambda answer, _: -1.0)
    await env.reset(TASK)
    assert (await env.step(bash("true"))).done is False
    _, done, info = await env.step(bash("true"))
    assert (done, info.truncated, info.submitted, info.reward, info.answer) == (
        True, True, False, -1.0, None,
    )  # fmt: skip


async def test_a_sandbox_that_dies_mid_step_ends_the_episode_as_sandbox_lost_not_a_model_error(
    sandbox: Sandbox,
) -> None:
    env = SandboxEnv(sandbox, EnvConfig(reattach_attempts=2))
    await env.reset(TASK)
    parent = (await sandbox.bash("ps -o args= -p $PPID")).stdout
    assert "sandfleet_runtime" in parent  # the shell's parent is the runtime agent itself
    observation, done, info = await env.step(bash("kill -9 $PPID; sleep 5"))
    assert (observation, done, info.sandbox_lost, info.malformed) == ("", True, True, False)
    assert info.error
    with pytest.raises(EpisodeNotStartedError):
        await env.step(bash("true"))


async def test_a_batch_steps_its_environments_concurrently_and_isolates_failures() -> None:
    async with await SandboxEnvBatch.local(3, config=EnvConfig(reattach_attempts=1)) as batch:
        tasks = [
            Task(id=f"t{i}", prompt=f"task {i}", files={"n.txt": f"{i}\n".encode()})
            for i in range(3)
        ]
        observations = await batch.reset_all(tasks)
        assert all(isinstance(o, Observation) for o in observations)
        results = await batch.step([bash("sleep 1; cat input/n.txt"), bash("kill -9 $PPID"), None])
        first, second, third = results
        assert first is not None and "\n0\n" in first.observation + "\n"
        assert second is not None and second.info.sandbox_lost and second.done
        assert third is None
        # The survivors carry on; the dead one fails its reset on its own.
        again = await batch.reset_all(tasks)
        assert isinstance(again[0], Observation) and isinstance(again[2], Observation)
        failure = again[1]
        assert isinstance(failure, ResetFailure) and failure.sandbox_lost and failure.index == 1
        # A step on an environment without an episode is that environment's error only.
        results = await batch.step([bash("cat input/n.txt"), bash("true"), submit_call()])
        assert results[0] is not None and "\n0\n" in results[0].observation + "\n"
        assert (
            results[1] is not None
            and results[1].done
            and "EpisodeNotStarted" in str(results[1].info.error)
        )
        assert results[2] is not None and results[2].info.submitted


def test_the_blocking_batch_runs_episodes_without_asyncio_in_the_caller() -> None:
    with SyncSandboxEnvBatch.local(2) as batch:
        tasks = [Task(id=f"s{i}", prompt="p", files={"x.txt": f"{i}\n".encode()}) for i in range(2)]
        observations = batch.reset_all(tasks)
        assert [o.task_id for o in observations if isinstance(o, Observation)] == ["s0", "s1"]
        results = batch.step([bash("cat input/x.txt"), submit_call()])
        assert results[0] is not None and "\n0\n" in results[0].observation + "\n"
        assert results[1] is not None and results[1].done
    assert batch.batch is None
    batch.close()  # closing twice does nothing


async def test_a_batch_of_forks_starts_every_episode_from_the_prepared_tree(
    sandbox: Sandbox,
) -> None:
    await sandbox.bash("mkdir -p repo && echo 'def f(): return 1' > repo/lib.py")
    async with await SandboxEnvBatch.fork(sandbox, 2) as batch:
        await batch.reset_all([TASK, TASK])
        await batch.step([bash("echo broken > repo/lib.py"), bash("true")])
        await batch.reset_all([TASK, TASK])
        results = await batch.step([bash("cat repo/lib.py")] * 2)
        assert all(r is not None and "def f(): return 1" in r.observation for r in results)
    assert (await sandbox.bash("cat repo/lib.py")).stdout == "def f(): return 1\n"
