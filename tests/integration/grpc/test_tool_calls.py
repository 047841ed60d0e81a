"""The tool-call contract against a real runtime: every editor command through the SDK and
the loop's entry point, typed client methods, and one text for one call on both paths."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandfleet.agent import execute_tool_call
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tool_calls import ToolCall, UndoEditRequest, ViewRequest
from sandfleet_runtime.server import RuntimeServer

pytestmark = pytest.mark.integration

HEADER = "Execution output of \\[str_replace_editor]:\n"
EDITOR = "str_replace_editor"


@pytest.fixture
async def sandbox(runtime: tuple[RuntimeServer, str]) -> AsyncIterator[Sandbox]:
    server, token = runtime
    sandbox = await Sandbox.connect(f"127.0.0.1:{server.port}", token)
    yield sandbox
    await sandbox.close()


async def both_paths(sandbox: Sandbox, name: str, arguments: dict[str, Any]) -> str:
    """The SDK's answer, after checking that the loop's entry point gives the same text
    (for calls that do not change the sandbox, so running them twice is harmless)."""
    from_loop = await execute_tool_call(sandbox, ToolCall("c1", name, json.dumps(arguments)))
    from_sdk = await sandbox.call_tool(name, arguments)
    assert from_sdk == from_loop
    return from_sdk


async def test_every_editor_command_runs_through_call_tool(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    target = str(tmp_path / "a.py")
    created = await sandbox.call_tool(
        EDITOR, {"command": "create", "path": target, "file_text": "a = 1\nb = 2\n"}
    )
    assert created.startswith(HEADER) and "Error:" not in created
    inserted = await sandbox.call_tool(
        EDITOR, {"command": "insert", "path": target, "insert_line": "0", "new_str": "# top\n"}
    )
    assert inserted.startswith(HEADER) and "Error:" not in inserted
    replaced = await sandbox.call_tool(
        EDITOR, {"command": "str_replace", "path": target, "old_str": "b = 2", "new_str": "b = 3"}
    )
    assert replaced.startswith(HEADER) and "b = 3" in replaced
    viewed = await both_paths(
        sandbox, EDITOR, {"command": "view", "path": target, "view_range": "[1, 2]"}
    )
    assert viewed.startswith(HEADER) and "     1\t# top" in viewed and "     2\ta = 1" in viewed
    assert "b = 3" not in viewed
    undone = await sandbox.call_tool(EDITOR, {"command": "undo_edit", "path": target})
    assert undone.startswith(HEADER) and "Error:" not in undone
    assert "b = 2" in await sandbox.edit(ViewRequest(target))
    assert await asyncio.to_thread(Path(target).read_text) == "# top\na = 1\nb = 2\n"


async def test_refusals_and_bad_calls_read_the_same_on_both_paths(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.py")
    refused = await both_paths(sandbox, EDITOR, {"command": "view", "path": missing})
    assert refused.startswith(HEADER + "Error:") and missing in refused
    relative = await both_paths(sandbox, EDITOR, {"command": "undo_edit", "path": "a.py"})
    assert relative.startswith(HEADER + "Error:") and "absolute path" in relative
    unknown = await both_paths(sandbox, "python", {"code": "1"})
    assert unknown == "Unknown action: python"
    no_file_text = await both_paths(sandbox, EDITOR, {"command": "create", "path": missing})
    assert no_file_text == HEADER + "Error: Parameter `file_text` is required for command: create."
    ran = await both_paths(sandbox, "execute_bash", {"command": "echo $((6 * 7))"})
    assert ran == "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n42\n"


async def test_the_client_has_one_typed_method_per_editor_command(
    client: RuntimeClient, tmp_path: Path
) -> None:
    target = str(tmp_path / "b.txt")
    await client.create(target, "one\ntwo\n")
    await client.insert(target, 2, "three\n")
    await client.str_replace(target, "two\n")  # new_str left out: the text is deleted
    assert await asyncio.to_thread(Path(target).read_text) == "one\nthree\n"
    assert "     2\tthree" in await client.view(target, [2, -1])
    await client.undo_edit(target)
    assert await asyncio.to_thread(Path(target).read_text) == "one\ntwo\nthree\n"
    never = str(tmp_path / "never.txt")
    with pytest.raises(ToolError, match="No edit history found for") as refused:
        await Sandbox(client).edit(UndoEditRequest(never))
    assert refused.value.code == "NOT_FOUND"
