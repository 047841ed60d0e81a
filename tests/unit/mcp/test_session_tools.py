"""The MCP session's tools without the SDK: the loop's schemas, the lazy sandbox, tool errors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandfleet.errors import SandboxLostError, SandfleetError
from sandfleet.mcp.tools import Caller, SessionTools, mcp_tool_specs
from sandfleet.sandbox.core import SandboxCore
from sandfleet.tool_calls import tool_specs
from tests.unit.tool_calls.test_dispatch import HEADER, FakeClient


class Opener:
    """Opens SandboxCores on FakeClients, recording each open, its token and each release."""

    def __init__(self, client: FakeClient | None = None) -> None:
        self.client = client or FakeClient()
        self.tokens: list[str | None] = []
        self.released = 0

    @contextlib.asynccontextmanager
    async def __call__(self, caller: Caller) -> AsyncIterator[SandboxCore]:
        self.tokens.append(caller.token)
        try:
            yield SandboxCore(self.client)
        finally:
            self.released += 1


def test_the_sandbox_tools_are_the_loops_own_schemas() -> None:
    specs = {spec.name: spec for spec in mcp_tool_specs()}
    for loop_spec in tool_specs():
        if loop_spec.name == "submit":  # the MCP client's agent ends its own run
            assert loop_spec.name not in specs
        else:
            assert specs[loop_spec.name] is loop_spec
    assert list(specs) == [
        "str_replace_editor", "execute_bash", "upload_file", "download_file", "reset",
    ]  # fmt: skip


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("execute_bash", {}, "Error: No command provided."),
    ("execute_bash", {"command": " "}, "Error: No command provided."),
    ("submit", {}, "Unknown action: submit"),
    ("python", {"code": "1"}, "Unknown action: python"),
    (
        "str_replace_editor",
        {"command": "delete", "path": "/a"},
        HEADER + "Error: Unrecognized command delete. The allowed commands for the "
        "str_replace_editor tool are: view, create, str_replace, insert, undo_edit",
    ),
    ("upload_file", {"path": "/a"},
     "Error: upload_file needs the parameter `content` as a string."),
    ("upload_file", {"path": "/a", "content": "x", "encoding": "zip"},
     "Error: `encoding` must be one of text, base64, got 'zip'."),
    ("upload_file", {"path": "/a", "content": "x", "mode": "755"},
     "Error: `mode` must be permission bits, an integer from 0 to 4095."),
    ("download_file", {}, "Error: download_file needs the parameter `path` as a non-empty string."),
]  # fmt: skip


@pytest.mark.parametrize(("name", "arguments", "expected"), BAD_CALLS)
async def test_a_bad_call_is_a_tool_error_and_opens_no_sandbox(
    name: str, arguments: dict[str, Any], expected: str
) -> None:
    opener = Opener()
    tools = SessionTools(opener)
    outcome = await tools.call(name, arguments)
    assert (outcome.text, outcome.is_error) == (expected, True)
    assert opener.tokens == [] and not tools.opened


async def test_the_first_call_opens_the_sandbox_once_with_the_callers_token() -> None:
    opener = Opener()
    tools = SessionTools(opener, tool_timeout_s=7)
    assert (await tools.call("reset", {})).text == "The sandbox is in its starting state."
    assert opener.tokens == []
    ran = await tools.call("execute_bash", {"command": "echo hi"}, caller=Caller("caller-token"))
    assert not ran.is_error and ran.text.startswith("Exit code: 0")
    await tools.call("execute_bash", {"command": "echo again"}, caller=Caller("caller-token"))
    assert opener.tokens == ["caller-token"]
    assert opener.client.calls[0][2]["timeout_s"] == 7
    await tools.close()
    assert opener.released == 1
    with pytest.raises(SandfleetError, match="session has ended"):
        await tools.call("execute_bash", {"command": "echo late"})
    assert opener.tokens == ["caller-token"]


async def test_an_editor_refusal_is_a_tool_error_with_the_loops_text() -> None:
    opener = Opener(FakeClient(refuse="The path /a does not exist."))
    tools = SessionTools(opener)
    refused = await tools.call("str_replace_editor", {"command": "view", "path": "/a"})
    assert refused.is_error
    assert refused.text == HEADER + "Error: The path /a does not exist."
    loop_text = await SandboxCore(opener.client).call_tool(
        "str_replace_editor", {"command": "view", "path": "/a"}
    )
    assert refused.text == loop_text


async def test_a_lost_sandbox_is_released_and_the_next_call_opens_a_fresh_one() -> None:
    opener = Opener(FakeClient(lost=True))
    tools = SessionTools(opener)
    with pytest.raises(SandboxLostError):
        await tools.call("execute_bash", {"command": "echo hi"})
    assert opener.released == 1 and not tools.opened
    opener.client = FakeClient()
    ran = await tools.call("execute_bash", {"command": "echo hi"})
    assert not ran.is_error
    assert len(opener.tokens) == 2
    await tools.close()
    assert opener.released == 2
