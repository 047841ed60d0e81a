"""Whole runs at once: long documents stay files, and 64 concurrent runs leave nothing behind."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from sandfleet import Sandbox
from sandfleet.agent import AgentConfig, StopReason, Task, openai_model, run_agent
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.backends.local.processes import pids_tagged
from tests.support.scripted_openai import (
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    Step,
    bash,
    submit,
)

pytestmark = pytest.mark.integration
NEEDLE = "The vault code is 7391-ALPHA."


def _tool_messages(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m.get("role") == "tool"]


async def test_a_long_document_is_answered_by_grep_without_entering_the_context(
    tmp_path: Path,
) -> None:
    # ~2 MB of filler with one needle: far more than a context window, trivial for grep.
    filler = "".join(f"Line {i}: nothing of interest here, only filler.\n" for i in range(45_000))
    document = filler[: len(filler) // 2] + NEEDLE + "\n" + filler[len(filler) // 2 :]

    def respond(request: RecordedRequest) -> Step:
        seen = _tool_messages(request)
        if not seen:
            return Reply(tool_calls=[bash("grep -n 'vault code' input/report.txt")])
        if len(seen) == 1:
            code = re.search(r"\d{4}-[A-Z]+", seen[0])
            assert code is not None, seen[0]
            return Reply(tool_calls=[bash(f"echo {code.group(0)} > output/answer.txt")])
        return Reply(text="done", tool_calls=[submit()])

    async with ScriptedOpenAIServer(responder=respond) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_turns=6)
        model = openai_model(config)
        try:
            async with Sandbox.local(LocalSandboxConfig(state_dir=tmp_path / "state")) as sandbox:
                task = Task(
                    id="long-doc",
                    prompt="What is the vault code in report.txt?",
                    files={"report.txt": document.encode()},
                )
                result = await run_agent(task, sandbox, model, config)
        finally:
            await model.aclose()
        bodies = [len(json.dumps(r.body)) for r in server.chat_requests]
    assert result.stop_reason is StopReason.SUBMITTED
    assert result.answer == "7391-ALPHA"
    assert len(document) > 2_000_000
    # The document lives in /testbed/input; only grep's one line ever reached the model.
    assert max(bodies) < 20_000, bodies


@pytest.mark.slow
async def test_sixty_four_concurrent_runs_all_submit_and_leave_no_sandbox_behind(
    tmp_path: Path,
) -> None:
    count = 64
    state_dir = tmp_path / "state"

    def respond(request: RecordedRequest) -> Step:
        first_user = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        number = int(re.search(r"square of (\d+)", first_user).group(1))  # type: ignore[union-attr]
        if not _tool_messages(request):
            return Reply(tool_calls=[bash(f"echo $(( {number} * {number} )) > output/answer.txt")])
        return Reply(text="done", tool_calls=[submit()])

    sandbox_ids: list[str] = []

    async with ScriptedOpenAIServer(responder=respond) as server:
        config = AgentConfig(model="scripted", base_url=server.base_url, max_turns=4)
        model = openai_model(config)

        async def one(number: int) -> tuple[int, str | None, StopReason]:
            async with Sandbox.local(LocalSandboxConfig(state_dir=state_dir)) as sandbox:
                stats = await sandbox.bash("echo $SANDFLEET_SANDBOX_ID")
                sandbox_ids.append(stats.stdout.strip())
                task = Task(id=f"sq-{number}", prompt=f"Compute the square of {number}.")
                result = await run_agent(task, sandbox, model, config)
            return number, result.answer, result.stop_reason

        try:
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(one(n) for n in range(count))), timeout=600
            )
        finally:
            await model.aclose()
    assert all(reason is StopReason.SUBMITTED for _, _, reason in outcomes)
    assert {n: answer for n, answer, _ in outcomes} == {n: str(n * n) for n in range(count)}
    assert len(set(sandbox_ids)) == count and all(sandbox_ids)
    left = {sid: pids for sid, pids in pids_tagged(sandbox_ids).items() if pids}
    assert left == {}, f"processes left behind: {left}"
    leftovers = sorted(p.name for p in state_dir.iterdir()) if state_dir.exists() else []
    assert leftovers == [], leftovers
