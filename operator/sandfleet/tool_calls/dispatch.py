"""Running a typed request against a runtime client: the one place a request becomes an RPC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sandfleet.errors import ToolError
from sandfleet.tool_calls.observations import (
    bash_observation,
    editor_error_observation,
    editor_observation,
)
from sandfleet.tool_calls.requests import (
    BashRequest,
    CreateRequest,
    EditorRequest,
    InsertRequest,
    SandboxRequest,
    StrReplaceRequest,
    UndoEditRequest,
    ViewRequest,
)

if TYPE_CHECKING:
    from sandfleet.clients.runtime.client import CommandResult


class EditorClient(Protocol):
    """The editor half of `RuntimeClient`; each method returns the editor's output text."""

    async def view(self, path: str, view_range: Sequence[int] | None = None) -> str: ...

    async def create(self, path: str, file_text: str) -> str: ...

    async def str_replace(self, path: str, old_str: str, new_str: str | None = None) -> str: ...

    async def insert(self, path: str, insert_line: int, new_str: str) -> str: ...

    async def undo_edit(self, path: str) -> str: ...


class ToolClient(EditorClient, Protocol):
    """What running the model's tools needs from `RuntimeClient`."""

    async def run_command(
        self,
        command: str,
        *,
        session: str = "default",
        timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> CommandResult: ...


async def run_editor_request(client: EditorClient, request: EditorRequest) -> str:
    """The editor's output for one request. Raises ToolError for an edit the editor refuses
    (the message is for the model), SandboxLostError when the runtime is gone."""
    match request:
        case ViewRequest(path=path, view_range=view_range):
            return await client.view(path, view_range)
        case CreateRequest(path=path, file_text=file_text):
            return await client.create(path, file_text)
        case StrReplaceRequest(path=path, old_str=old_str, new_str=new_str):
            return await client.str_replace(path, old_str, new_str)
        case InsertRequest(path=path, insert_line=insert_line, new_str=new_str):
            return await client.insert(path, insert_line, new_str)
        case UndoEditRequest(path=path):
            return await client.undo_edit(path)


async def observe(
    client: ToolClient, request: SandboxRequest, *, timeout_s: float = 0, max_output_chars: int = 0
) -> str:
    """The observation the model sees for one request; raises SandboxLostError only.

    `timeout_s` bounds a bash command (0: the runtime's default); `max_output_chars` caps
    its output (0: the runtime's default).
    """
    if isinstance(request, BashRequest):
        try:
            result = await client.run_command(
                request.command, timeout_s=timeout_s, max_output_chars=max_output_chars
            )
        except ToolError as exc:  # a command bash cannot take (a NUL, a lone surrogate)
            return str(exc)
        return bash_observation(result)
    try:
        return editor_observation(await run_editor_request(client, request))
    except ToolError as exc:
        return editor_error_observation(str(exc))
