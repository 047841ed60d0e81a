"""What every transport must do for one MCP session, checked through the SDK's client."""

from __future__ import annotations

import json

from mcp import ClientSession

from tests.integration.mcp.mcp_clients import TOOL_NAMES, b64, text

HEADER = "Execution output of \\[str_replace_editor]:\n"
BINARY = bytes(range(256)) * 3


async def check_tools(session: ClientSession) -> None:
    """The tools and their schemas (the loop's own for execute_bash and the editor), a
    command, an edit, upload and download, and bad calls that stay tool errors."""
    listed = (await session.list_tools()).tools
    assert [tool.name for tool in listed] == TOOL_NAMES
    bash = next(tool for tool in listed if tool.name == "execute_bash")
    assert bash.inputSchema["required"] == ["command"]

    ran = await session.call_tool("execute_bash", {"command": "cd /tmp && echo hi; pwd"})
    assert not ran.isError
    assert text(ran) == (
        "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nhi\n/tmp\n"
    )
    failed = await session.call_tool("execute_bash", {"command": "echo oops >&2; exit 3"})
    assert not failed.isError and text(failed).startswith("Exit code: Error: Exit code 3")

    created = await session.call_tool(
        "str_replace_editor",
        {"command": "create", "path": "/tmp/a.py", "file_text": "x = 1\ny = 2\n"},
    )
    assert not created.isError and text(created).startswith(HEADER), text(created)
    edited = await session.call_tool(
        "str_replace_editor",
        {"command": "str_replace", "path": "/tmp/a.py", "old_str": "y = 2", "new_str": "y = 3"},
    )
    assert not edited.isError and "has been edited" in text(edited)
    shown = await session.call_tool("execute_bash", {"command": "cat /tmp/a.py"})
    assert "x = 1\ny = 3\n" in text(shown)

    uploaded = await session.call_tool(
        "upload_file", {"path": "/tmp/in/data.bin", "content": b64(BINARY), "encoding": "base64"}
    )
    assert not uploaded.isError and text(uploaded) == "Wrote 768 bytes to /tmp/in/data.bin."
    await session.call_tool("upload_file", {"path": "/tmp/in/note.txt", "content": "héllo\n"})
    summed = await session.call_tool("execute_bash", {"command": "wc -c < /tmp/in/data.bin"})
    assert "768" in text(summed)
    back = await session.call_tool(
        "download_file", {"path": "/tmp/in/data.bin", "encoding": "base64"}
    )
    assert not back.isError and text(back) == b64(BINARY)
    note = await session.call_tool("download_file", {"path": "/tmp/in/note.txt"})
    assert text(note) == "héllo\n"


async def check_bad_calls(session: ClientSession) -> None:
    """Bad calls come back as tool errors (isError) in the seed's words; none ends the
    session: the shell keeps its state between and after them."""
    await session.call_tool("execute_bash", {"command": "export KEPT=yes"})
    bad_calls = {
        ("execute_bash", "{}"): "Error: No command provided.",
        ("execute_bash", '{"command": ""}'): "Error: No command provided.",
        ("browse", "{}"): "Unknown action: browse",
        ("submit", "{}"): "Unknown action: submit",
        ("str_replace_editor", '{"command": "delete", "path": "/tmp/a.py"}'): HEADER
        + "Error: Unrecognized command delete. The allowed commands for the "
        "str_replace_editor tool are: view, create, str_replace, insert, undo_edit",
    }
    for (name, arguments), expected in bad_calls.items():
        result = await session.call_tool(name, json.loads(arguments))
        assert result.isError and text(result) == expected, (name, text(result))
    refused = await session.call_tool(
        "str_replace_editor", {"command": "view", "path": "/no/such/file"}
    )
    assert refused.isError and text(refused).startswith(HEADER + "Error:")
    wrong_type = await session.call_tool("execute_bash", {"command": 5})
    assert wrong_type.isError and "must be a string" in text(wrong_type)
    missing = await session.call_tool("download_file", {"path": "/no/such/file"})
    assert missing.isError
    not_b64 = await session.call_tool(
        "upload_file", {"path": "/tmp/x", "content": "!!", "encoding": "base64"}
    )
    assert not_b64.isError and text(not_b64) == "Error: `content` is not valid base64."
    binary = await session.call_tool("upload_file", {"path": "/tmp/b", "content": "", "mode": -1})
    assert binary.isError
    # The transfer bounds: 4 MiB each way, said as a tool error.
    too_big = await session.call_tool(
        "upload_file", {"path": "/tmp/big", "content": "x" * (4 * 1024 * 1024 + 1)}
    )
    assert too_big.isError and "at most 4194304" in text(too_big), text(too_big)
    await session.call_tool("execute_bash", {"command": "head -c 4194305 /dev/zero > /tmp/big"})
    big = await session.call_tool("download_file", {"path": "/tmp/big", "encoding": "base64"})
    assert big.isError and "larger than 4194304 bytes" in text(big), text(big)
    exact = await session.call_tool("execute_bash", {"command": "truncate -s 4194304 /tmp/big"})
    assert not exact.isError
    fits = await session.call_tool("download_file", {"path": "/tmp/big", "encoding": "base64"})
    assert not fits.isError and len(text(fits)) == 4 * ((4 * 1024 * 1024 + 2) // 3)
    still = await session.call_tool("execute_bash", {"command": "echo $KEPT"})
    assert not still.isError and "yes" in text(still)


async def check_reset(session: ClientSession) -> None:
    await session.call_tool("execute_bash", {"command": "sleep 300 &"})
    reset = await session.call_tool("reset", {})
    assert not reset.isError and text(reset).startswith("The sandbox is back"), text(reset)
    jobs = await session.call_tool("execute_bash", {"command": "pgrep -c sleep || true"})
    assert "0" in text(jobs)
