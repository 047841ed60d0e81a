"""One dispatch point: a typed request becomes one typed client call, and both entry points
(the agent loop and `Sandbox.call_tool`) answer a call with the same text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from sandfleet.agent import execute_tool_call
from sandfleet.clients.runtime.client import CommandResult
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tool_calls import (
    CreateRequest,
    EditorRequest,
    InsertRequest,
    StrReplaceRequest,
    ToolCall,
    UndoEditRequest,
    ViewRequest,
    observe,
    parse_tool_call,
    run_editor_request,
    tool_specs,
)
from tests.support.agent_fakes import FakeSandbox

HEADER = "Execution output of \\[str_replace_editor]:\n"


class FakeClient:
    """The ToolClient surface of RuntimeClient, recording each call."""

    def __init__(self, *, refuse: str | None = None, lost: bool = False) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._refuse = refuse
        self._lost = lost

    def _answer(self, method: str, *args: Any, **kwargs: Any) -> str:
        self.calls.append((method, args, kwargs))
        if self._lost:
            raise SandboxLostError("runtime agent unreachable (fake)")
        if self._refuse is not None:
            raise ToolError(self._refuse, code="NOT_FOUND")
        return f"{method} done"

    async def view(self, path: str, view_range: Sequence[int] | None = None) -> str:
        return self._answer("view", path, view_range)

    async def create(self, path: str, file_text: str) -> str:
        return self._answer("create", path, file_text)

    async def str_replace(self, path: str, old_str: str, new_str: str | None = None) -> str:
        return self._answer("str_replace", path, old_str, new_str)

    async def insert(self, path: str, insert_line: int, new_str: str) -> str:
        return self._answer("insert", path, insert_line, new_str)

    async def undo_edit(self, path: str) -> str:
        return self._answer("undo_edit", path)

    async def run_command(
        self, command: str, *, session: str = "default", timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> CommandResult:  # fmt: skip
        self._answer("run_command", command, timeout_s=timeout_s, max_output_chars=max_output_chars)
        return CommandResult(
            stdout="hi\n", stderr="", exit_code=0, timed_out=False, interrupted=False,
            shell_exited=False, truncated=False, duration_s=0.1, cwd="/testbed",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (ViewRequest("/a"), ("view", ("/a", None))),
        (ViewRequest("/a", (2, -1)), ("view", ("/a", (2, -1)))),
        (CreateRequest("/a", "x\n"), ("create", ("/a", "x\n"))),
        (StrReplaceRequest("/a", "x", None), ("str_replace", ("/a", "x", None))),
        (StrReplaceRequest("/a", "x", "y"), ("str_replace", ("/a", "x", "y"))),
        (InsertRequest("/a", 3, "z"), ("insert", ("/a", 3, "z"))),
        (UndoEditRequest("/a"), ("undo_edit", ("/a",))),
    ],
)
async def test_each_editor_request_calls_its_typed_client_method(
    request_: EditorRequest, expected: tuple[str, tuple[Any, ...]]
) -> None:
    client = FakeClient()
    assert await run_editor_request(client, request_) == f"{expected[0]} done"
    assert client.calls == [(*expected, {})]


async def test_observe_renders_the_seed_observations() -> None:
    client = FakeClient()
    bash = parse_tool_call("execute_bash", {"command": "echo hi"})
    output = await observe(client, bash, timeout_s=7, max_output_chars=100)
    assert output == "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nhi\n"
    assert client.calls[0] == (
        "run_command",
        ("echo hi",),
        {"timeout_s": 7, "max_output_chars": 100},
    )
    assert await observe(client, ViewRequest("/a")) == HEADER + "view done"
    refused = FakeClient(refuse="The path /a does not exist.")
    assert (
        await observe(refused, ViewRequest("/a")) == HEADER + "Error: The path /a does not exist."
    )
    with pytest.raises(SandboxLostError):
        await observe(FakeClient(lost=True), ViewRequest("/a"))


async def test_sandbox_call_tool_parses_then_dispatches_through_the_client() -> None:
    client = FakeClient()
    sandbox = Sandbox(client, tool_timeout_s=9, max_output_chars=50)
    arguments = {"command": "view", "path": "/a", "view_range": "[1, 5]", "junk": None}
    assert await sandbox.call_tool("str_replace_editor", arguments) == HEADER + "view done"
    assert await sandbox.call_tool("execute_bash", {"command": "ls"}) == (
        "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nhi\n"
    )
    assert await sandbox.call_tool("submit", {}) == "Submitted."
    assert await sandbox.edit(InsertRequest("/a", 0, "top")) == "insert done"
    assert client.calls == [
        ("view", ("/a", (1, 5)), {}),
        ("run_command", ("ls",), {"timeout_s": 9, "max_output_chars": 50}),
        ("insert", ("/a", 0, "top"), {}),
    ]
    with pytest.raises(ToolError):
        await Sandbox(FakeClient(refuse="no"), tool_timeout_s=1).edit(UndoEditRequest("/a"))


BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("python", {"code": "1"}),
    ("execute_bash", {}),
    ("execute_bash", {"command": 5}),
    ("execute_bash", {"command": "   "}),
    ("str_replace_editor", {"path": "/a"}),
    ("str_replace_editor", {"command": "view"}),
    ("str_replace_editor", {"command": "view", "path": ""}),
    ("str_replace_editor", {"command": "delete", "path": "/a"}),
    ("str_replace_editor", {"command": "view", "path": "/a", "view_range": [1]}),
    ("str_replace_editor", {"command": "view", "path": "/a", "view_range": "1:5"}),
    ("str_replace_editor", {"command": "create", "path": "/a"}),
    ("str_replace_editor", {"command": "str_replace", "path": "/a"}),
    ("str_replace_editor", {"command": "insert", "path": "/a", "new_str": "x"}),
    ("str_replace_editor", {"command": "insert", "path": "/a", "insert_line": "x"}),
    ("str_replace_editor", {"command": "insert", "path": "/a", "insert_line": 1}),
]


@pytest.mark.parametrize(("name", "arguments"), BAD_CALLS)
async def test_the_loop_and_the_sdk_answer_a_bad_call_with_the_same_text(
    name: str, arguments: dict[str, Any]
) -> None:
    loop_sandbox = FakeSandbox()
    call = ToolCall("c1", name, json.dumps(arguments))
    from_loop = await execute_tool_call(loop_sandbox, call, specs=tool_specs())
    client = FakeClient()
    from_sdk = await Sandbox(client).call_tool(name, arguments)
    assert from_sdk == from_loop
    # "Unknown action: <name>" is the seed's text for an unknown tool, without "Error:".
    assert from_loop.startswith(("Error: ", HEADER + "Error: ", "Unknown action: ")), from_loop
    assert loop_sandbox.tool_calls == [] and client.calls == []
