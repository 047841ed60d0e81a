"""Bad arguments get model-readable status codes from a real runtime, never UNKNOWN, and the
loop turns them into observations while the sandbox stays usable."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from sandfleet.agent import execute_tool_call
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tool_calls import ToolCall
from sandfleet_runtime.server import RuntimeServer

pytestmark = pytest.mark.integration

MODEL_FIXABLE = {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "ALREADY_EXISTS"}
LONG = "a" * 4097
Call = Callable[[RuntimeClient, Path], Awaitable[object]]

CASES: dict[str, Call] = {
    "view NUL path": lambda c, d: c.view(f"{d}/a\0b"),
    "create NUL path": lambda c, d: c.create(f"{d}/a\0b", "x"),
    "view 4,097-char path": lambda c, d: c.view(f"{d}/{LONG}"),
    "str_replace 4,097-char path": lambda c, d: c.str_replace(f"{d}/{LONG}", "a", "b"),
    "create 4,097-char path": lambda c, d: c.create(f"{d}/{LONG}", "x"),
    "view symlink loop": lambda c, d: c.view(f"{d}/loop/x"),
    "create on a directory": lambda c, d: c.create(f"{d}/dir", "x"),
    "str_replace on a directory": lambda c, d: c.str_replace(f"{d}/dir", "a", "b"),
    "create below a file": lambda c, d: c.create(f"{d}/file/x", "x"),
    "bash NUL command": lambda c, d: c.run_command("echo a\0b"),
    "bash lone surrogate": lambda c, d: c.run_command("echo \udc80"),
    "create lone surrogate text": lambda c, d: c.create(f"{d}/s", "a\udc80b"),
    "view lone surrogate path": lambda c, d: c.view(f"{d}/s\udc80"),
    "download NUL path": lambda c, d: c.download(f"{d}/a\0b", d / "out"),
    "download 4,097-char path": lambda c, d: c.download(f"{d}/{LONG}", d / "out"),
    "download a directory": lambda c, d: c.download(f"{d}/dir", d / "out"),
    "list NUL path": lambda c, d: c.list_files(f"{d}/a\0b"),
    "list 4,097-char path": lambda c, d: c.list_files(f"{d}/{LONG}"),
    "upload NUL path": lambda c, d: c.upload(b"x", f"{d}/a\0b"),
    "upload 4,097-char path": lambda c, d: c.upload(b"x", f"{d}/{LONG}"),
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x\n")
    os.symlink("loop", tmp_path / "loop")
    return tmp_path


@pytest.mark.parametrize("name", list(CASES))
async def test_a_bad_argument_is_a_tool_error_with_a_model_fixable_code(
    client: RuntimeClient, workdir: Path, name: str
) -> None:
    with pytest.raises(ToolError) as raised:
        await CASES[name](client, workdir)
    assert raised.value.code in MODEL_FIXABLE
    message = str(raised.value)
    assert message and "Unexpected" not in message
    assert len(message) < 1000 + len(LONG), "at most one echo of the path the call gave"
    # The runtime is alive and serving: nothing about the call was infrastructure.
    assert (await client.run_command("echo alive")).stdout == "alive\n"


@pytest.fixture
async def sandbox(runtime: tuple[RuntimeServer, str]) -> AsyncIterator[Sandbox]:
    server, token = runtime
    sandbox = await Sandbox.connect(f"127.0.0.1:{server.port}", token)
    yield sandbox
    await sandbox.close()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("str_replace_editor", {"command": "view", "path": "/tmp/a\0b"}),
        ("str_replace_editor", {"command": "view", "path": "/tmp/" + LONG}),
        ("str_replace_editor", {"command": "create", "path": "/tmp/x", "file_text": "\udc80"}),
        ("str_replace_editor", {"command": "view", "path": "/tmp/\udc80"}),
        ("execute_bash", {"command": "echo a\0b"}),
        ("execute_bash", {"command": "echo \udc80"}),
    ],
)
async def test_the_loop_turns_bad_arguments_into_observations(
    sandbox: Sandbox, tool: str, arguments: dict[str, str]
) -> None:
    # json.dumps writes the surrogate as "\udc80", which json.loads turns back into one:
    # exactly what a model's tool-call JSON can carry.
    call = ToolCall("c1", tool, json.dumps(arguments))
    observation = await execute_tool_call(sandbox, call)
    assert isinstance(observation, str) and observation
    assert await sandbox.call_tool(tool, json.loads(call.arguments)) == observation  # the SDK
    assert "Traceback" not in observation and "UNKNOWN" not in observation
    alive = await execute_tool_call(sandbox, ToolCall("c2", "execute_bash", '{"command": "true"}'))
    assert "Exit code: 0" in alive
