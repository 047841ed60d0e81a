"""sandfleet.runs.execute_task as a library: no Settings, no argparse, no terminal; the
sandbox comes from a SandboxSource and live progress goes to an event callback."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from sandfleet.agent import AgentConfig, AgentEvent, RunFinished, Task, ToolCalled
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.errors import SandboxStartError
from sandfleet.runs import LocalSandboxes, RunFailure, execute_task, run_folder
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tasks import TaskSpec
from tests.support.agent_fakes import ScriptedModel, turn

CONFIG = AgentConfig(model="scripted", max_turns=4)


async def test_a_task_runs_in_a_local_sandbox_and_reports_each_event(tmp_path: Path) -> None:
    folder = await run_folder(tmp_path / "results", "t1")
    write = "printf 42 > /testbed/output/answer.txt && echo written"
    model = ScriptedModel(
        [turn("", ("execute_bash", {"command": write})), turn("", ("submit", {}))]
    )
    events: list[AgentEvent] = []
    sandboxes = LocalSandboxes(LocalSandboxConfig(state_dir=tmp_path / "state"))

    outcome = await execute_task(
        TaskSpec(Task(id="t1", prompt="write 42")), model=model, config=CONFIG,
        sandboxes=sandboxes, folder=folder, on_event=events.append,
    )  # fmt: skip

    assert (outcome.stop_reason, outcome.answer, outcome.turns) == ("submitted", "42", 2)
    assert (folder / "output" / "answer.txt").read_text() == "42"
    assert [e.name for e in events if isinstance(e, ToolCalled)] == ["execute_bash", "submit"]
    assert isinstance(events[-1], RunFinished)
    recorded = json.loads((folder / "result.json").read_text())
    assert recorded["run_id"] == folder.name and recorded["stop_reason"] == "submitted"


async def test_a_source_that_cannot_give_a_sandbox_ends_in_a_recorded_outcome(
    tmp_path: Path,
) -> None:
    opened: list[str] = []

    @contextlib.asynccontextmanager
    async def no_sandboxes(spec: TaskSpec, *, tool_timeout_s: float) -> AsyncIterator[Sandbox]:
        opened.append(spec.task.id)
        raise SandboxStartError("the pool is empty")
        yield  # pragma: no cover - never reached: a generator for the context manager

    folder = await run_folder(tmp_path / "results", "t2")
    outcome = await execute_task(
        TaskSpec(Task(id="t2", prompt="p")), model=ScriptedModel([]), config=CONFIG,
        sandboxes=no_sandboxes, folder=folder,
    )  # fmt: skip

    assert opened == ["t2"]
    assert outcome.stop_reason == RunFailure.LAUNCH_FAILED
    assert outcome.error == "the sandbox did not start: the pool is empty"
    assert json.loads((folder / "result.json").read_text())["stop_reason"] == "launch_failed"
