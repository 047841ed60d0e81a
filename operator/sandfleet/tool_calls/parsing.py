"""The one parser: a model's tool call (name + JSON text or mapping) -> a typed request.

Every entry point (the agent loop, `Sandbox.call_tool`, `sandfleet replay`) parses here,
so the same bad call gets the same message everywhere. Messages are the observation the
model sees; they are part of recorded trajectories, which replay compares, so keep them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sandfleet.tool_calls.observations import editor_error_observation
from sandfleet.tool_calls.requests import (
    EDITOR_COMMANDS,
    EXECUTE_BASH,
    STR_REPLACE_EDITOR,
    SUBMIT,
    BashRequest,
    CreateRequest,
    EditorRequest,
    InsertRequest,
    StrReplaceRequest,
    SubmitRequest,
    ToolCallError,
    ToolRequest,
    UndoEditRequest,
    ViewRequest,
)
from sandfleet.tool_calls.specs import ToolSpec, tool_specs

NO_COMMAND = "Error: No command provided."
"""The seed's observation for an execute_bash call without a command (missing or blank)."""


def parse_tool_call(
    name: str, arguments: str | Mapping[str, Any], *, tools: Sequence[ToolSpec] | None = None
) -> ToolRequest:
    """The typed request for one call to one of `tools` (default: every tool, undo_edit
    offered).

    `arguments` is the model's JSON text or an already decoded mapping. Nulls and
    undeclared keys are dropped and near-miss types coerced ("12" for an integer, "[1, 5]"
    for a list). `submit` takes no parameters, so whatever comes with it is ignored.
    Raises ToolCallError, whose message is what the model should see.
    """
    specs = tool_specs() if tools is None else tools
    spec = next((s for s in specs if s.name == name), None)
    if spec is None:
        raise ToolCallError(f"Unknown action: {name}")  # the seed's text
    if name == SUBMIT:
        return SubmitRequest()
    decoded = _decoded(name, arguments)
    if name == EXECUTE_BASH and decoded.get("command") is None:
        # The seed says this for a missing command as for an empty one.
        raise ToolCallError(NO_COMMAND)
    present = _schema_checked(spec, decoded)
    if name == EXECUTE_BASH:
        return _bash_request(present)
    if name == STR_REPLACE_EDITOR:
        return _editor_request(present)
    raise ToolCallError(f"Error: the tool {name!r} cannot run in the sandbox.")


def _decoded(tool: str, arguments: str | Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(arguments, str):
        decoded: Any = arguments
    else:
        raw = arguments.strip()
        try:
            decoded = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ToolCallError(
                f"Error: the arguments for {tool} are not valid JSON ({exc.msg} at "
                f"character {exc.pos}). Send the arguments as one JSON object."
            ) from None
    if not isinstance(decoded, Mapping):
        raise ToolCallError(
            f"Error: the arguments for {tool} must be a JSON object, got {_json_type(decoded)}."
        )
    surrogate = _lone_surrogate(decoded)
    if surrogate is not None:
        # JSON may escape one (\ud800), but no shell, file or RPC can carry it.
        raise ToolCallError(
            f"Error: the arguments for {tool} contain a lone UTF-16 surrogate "
            f"({surrogate.encode('unicode_escape').decode('ascii')}), which is not text. "
            "Send the characters themselves, or complete surrogate pairs."
        )
    return decoded


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string (key or value) of a decoded JSON value."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return found.group(0)
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None


def _schema_checked(spec: ToolSpec, decoded: Mapping[str, Any]) -> dict[str, Any]:
    """The declared, non-null arguments, each checked (and coerced) against its schema type."""
    properties: Mapping[str, Any] = spec.parameters.get("properties", {})
    # Models often send null for the optional fields they do not use; that means "absent".
    present = {k: v for k, v in decoded.items() if v is not None and k in properties}
    for name in spec.parameters.get("required", ()):
        if name not in present:
            raise ToolCallError(
                f"Error: {spec.name} needs the parameter `{name}`, which is missing."
            )
    return {name: _checked(spec, name, properties[name], v) for name, v in present.items()}


def _checked(spec: ToolSpec, name: str, schema: Mapping[str, Any], value: Any) -> Any:
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            raise _type_error(spec.name, name, "a string", value)
        if name == "command" and spec.name == STR_REPLACE_EDITOR:
            return _editor_command(value)
        return value
    if kind == "integer":
        return _integer(spec.name, name, value)
    if kind == "array":
        if isinstance(value, str):  # "[1, 20]" sent as text
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise _type_error(spec.name, name, "a list of integers", value) from None
        if not isinstance(value, list | tuple):  # a tuple from an SDK caller is fine
            raise _type_error(spec.name, name, "a list of integers", value)
        return [_integer(spec.name, name, item) for item in value]
    return value


def _editor_command(value: str) -> str:
    # Every command the sandbox implements is accepted, not only the advertised ones: a
    # model trained elsewhere may send undo_edit, and refusing would only waste a turn. The
    # refusal is the seed's (and Anthropic's editor's) text, listing what the editor runs.
    if value not in EDITOR_COMMANDS:
        raise _editor_error(
            f"Unrecognized command {value}. The allowed commands for the "
            f"{STR_REPLACE_EDITOR} tool are: {', '.join(EDITOR_COMMANDS)}"
        )
    return value


def _bash_request(present: Mapping[str, Any]) -> BashRequest:
    command: str = present["command"]
    if not command.strip():
        raise ToolCallError(NO_COMMAND)
    return BashRequest(command)


def _editor_request(present: Mapping[str, Any]) -> EditorRequest:
    """The request for one editor command; the fields other commands use are ignored.

    These messages carry the editor's observation header, as the sandbox's own refusals do.
    """
    command: str = present["command"]
    path: str = present["path"]
    if not path:
        raise _editor_error("Parameters `command` and `path` are required.")
    if command == ViewRequest.command:
        return ViewRequest(path, _view_range(present.get("view_range")))
    if command == CreateRequest.command:
        return CreateRequest(path, _required(present, "file_text", command))
    if command == StrReplaceRequest.command:
        old_str = _required(present, "old_str", command)
        return StrReplaceRequest(path, old_str, present.get("new_str"))
    if command == InsertRequest.command:
        insert_line: int = _required(present, "insert_line", command)
        return InsertRequest(path, insert_line, _required(present, "new_str", command))
    return UndoEditRequest(path)


def _required(present: Mapping[str, Any], name: str, command: str) -> Any:
    if name not in present:
        raise _editor_error(f"Parameter `{name}` is required for command: {command}.")
    return present[name]


def _view_range(value: list[int] | None) -> tuple[int, int] | None:
    if not value:  # [] is what some models send for "the whole file"
        return None
    if len(value) != 2:
        raise _editor_error(
            f"Parameter `view_range` must be a list of two integers like [1, 20], got {value!r}."
        )
    return value[0], value[1]


def _editor_error(message: str) -> ToolCallError:
    return ToolCallError(editor_error_observation(message))


def _integer(tool: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _type_error(tool, name, "an integer", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise _type_error(tool, name, "an integer", value)


def _type_error(tool: str, name: str, expected: str, value: Any) -> ToolCallError:
    return ToolCallError(
        f"Error: parameter `{name}` of {tool} must be {expected}, got {_json_type(value)} "
        f"{_short_json(value)}."
    )


# bool before int: True is an int to isinstance, but the model sent a boolean.
_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    ((list, tuple), "a list"),
    (Mapping, "an object"),
    (type(None), "null"),
)


def _json_type(value: Any) -> str:
    named = next((name for types, name in _JSON_TYPES if isinstance(value, types)), None)
    # Anything else came from an SDK caller's mapping, not from JSON.
    return named or f"a {type(value).__name__}"


def _short_json(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."
