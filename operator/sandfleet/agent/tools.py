"""The three tools the model gets (seed-compatible schemas), argument checking and dispatch."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sandfleet.agent.model import ToolCall
from sandfleet.errors import ToolError

if TYPE_CHECKING:
    from sandfleet.agent.sandbox_access import AgentSandbox

EXECUTE_BASH = "execute_bash"
STR_REPLACE_EDITOR = "str_replace_editor"
SUBMIT = "submit"

# The seed project's editor enum; undo_edit is our addition and can be switched off.
_SEED_EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
# Accepted even when not advertised: a model trained elsewhere may still send it, and the
# sandbox implements it, so refusing would only waste a turn.
_ACCEPTED_EDITOR_COMMANDS = (*_SEED_EDITOR_COMMANDS, "undo_edit")


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function tool: name, model-facing description and JSON-schema parameters.

    Specs are shared between runs (see `tool_specs`): treat `parameters` as read-only.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]


class ToolArgumentError(ValueError):
    """A tool call the loop cannot run as sent; the message is the observation for the model."""


_EDITOR_DESCRIPTION = """\
View, create and edit files in the sandbox.
* Files keep their state between calls.
* `view` on a file prints it with line numbers, like `cat -n`; on a directory it lists the \
non-hidden files and directories up to 2 levels deep.
* `create` writes a new file; it refuses a path that already exists as a file.
* Very long output is cut short and marked with `<response clipped>`.

Using `str_replace`:
* `old_str` must match one or more whole consecutive lines of the file exactly, whitespace \
included.
* `old_str` must occur exactly once in the file; if it occurs more often nothing is replaced, \
so include enough surrounding lines to make it unique.
* `new_str` holds the lines that take the place of `old_str`.
"""
_UNDO_NOTE = "* `undo_edit` reverts the last change made to the file at `path`.\n"

_BASH_DESCRIPTION = """\
Run a bash command in the sandbox's shell and get back its exit code, stdout and stderr.

Parameters:
  (1) command (string, required): the command line to run, e.g. `python solve.py`.
"""

_SUBMIT_DESCRIPTION = """\
Finish the task.

Call it once the work is done and the final answer is in the answer file. It takes no \
parameters.
"""


def _editor_parameters(commands: Sequence[str]) -> dict[str, Any]:
    listed = ", ".join(f"`{c}`" for c in commands)
    return {
        "type": "object",
        "properties": {
            "command": {
                "description": f"Which operation to run. Allowed options are: {listed}.",
                "enum": list(commands),
                "type": "string",
            },
            "path": {
                "description": "Absolute path of a file or directory, e.g. "
                "`/testbed/solve.py` or `/testbed`.",
                "type": "string",
            },
            "file_text": {
                "description": "For `create` (required): the full content of the new file.",
                "type": "string",
            },
            "old_str": {
                "description": "For `str_replace` (required): the exact text in `path` to replace.",
                "type": "string",
            },
            "new_str": {
                "description": "For `str_replace` (optional): the replacement text; leave it "
                "out to delete `old_str`. For `insert` (required): the text to insert.",
                "type": "string",
            },
            "insert_line": {
                "description": "For `insert` (required): `new_str` goes AFTER this line "
                "(0 means at the top of the file).",
                "type": "integer",
            },
            "view_range": {
                "description": "For `view` of a file (optional): the lines to show as "
                "[start, end], counting from 1, e.g. [11, 12] shows lines 11 and 12; "
                "[start, -1] shows everything from `start` to the end.",
                "type": "array",
                "items": {"type": "integer"},
            },
        },
        "required": ["command", "path"],
    }


@functools.cache
def tool_specs(*, offer_undo_edit: bool = True) -> tuple[ToolSpec, ...]:
    """The tools in the seed project's order: [str_replace_editor, execute_bash, submit].

    Cached, so every run with the same setting shares one tuple (adapters key on it).
    """
    commands = _ACCEPTED_EDITOR_COMMANDS if offer_undo_edit else _SEED_EDITOR_COMMANDS
    editor_description = _EDITOR_DESCRIPTION + (_UNDO_NOTE if offer_undo_edit else "")
    bash_parameters = {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The command line (with its arguments) to run, e.g. "
                "'python solve.py'.",
            }
        },
        "required": ["command"],
    }
    submit_parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    return (
        ToolSpec(STR_REPLACE_EDITOR, editor_description, _editor_parameters(commands)),
        ToolSpec(EXECUTE_BASH, _BASH_DESCRIPTION, bash_parameters),
        ToolSpec(SUBMIT, _SUBMIT_DESCRIPTION, submit_parameters),
    )


def parse_arguments(call: ToolCall, specs: Sequence[ToolSpec]) -> dict[str, Any]:
    """Decode and check a call's arguments against its tool's schema.

    Returns the arguments with nulls and undeclared keys dropped and near-miss types
    coerced ("12" for an integer, "[1, 5]" for a list). Raises ToolArgumentError with a
    model-readable message otherwise.
    """
    spec = next((s for s in specs if s.name == call.name), None)
    if spec is None:
        names = ", ".join(s.name for s in specs)
        raise ToolArgumentError(
            f"Error: there is no tool named {call.name!r}. The available tools are: {names}."
        )
    raw = call.arguments.strip()
    try:
        decoded = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(
            f"Error: the arguments for {call.name} are not valid JSON ({exc.msg} at "
            f"character {exc.pos}). Send the arguments as one JSON object."
        ) from None
    if not isinstance(decoded, dict):
        raise ToolArgumentError(
            f"Error: the arguments for {call.name} must be a JSON object, got "
            f"{_json_type(decoded)}."
        )
    properties: Mapping[str, Any] = spec.parameters.get("properties", {})
    # Models often send null for the optional fields they do not use; that means "absent".
    present = {k: v for k, v in decoded.items() if v is not None and k in properties}
    for name in spec.parameters.get("required", ()):
        if name not in present:
            raise ToolArgumentError(
                f"Error: {call.name} needs the parameter `{name}`, which is missing."
            )
    return {name: _checked(call.name, name, properties[name], v) for name, v in present.items()}


async def execute_tool_call(
    sandbox: AgentSandbox, call: ToolCall, *, specs: Sequence[ToolSpec] | None = None
) -> str:
    """The observation for one sandbox tool call, exactly as the agent loop produces it.

    The arguments are checked against `specs` (default: `tool_specs()`); a call that fails
    the check gets the model-readable message instead of reaching the sandbox. `submit` is
    the loop's to handle, not the sandbox's. Raises SandboxLostError only.
    """
    try:
        arguments = parse_arguments(call, tool_specs() if specs is None else specs)
    except ToolArgumentError as exc:
        return str(exc)
    try:
        return await sandbox.call_tool(call.name, arguments)
    except ToolError as exc:  # the contract says "returned as text"; be lenient anyway
        return str(exc)


def _checked(tool: str, name: str, schema: Mapping[str, Any], value: Any) -> Any:
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            raise _type_error(tool, name, "a string", value)
        if name == "command" and tool == STR_REPLACE_EDITOR:
            return _editor_command(value)
        return value
    if kind == "integer":
        return _integer(tool, name, value)
    if kind == "array":
        if isinstance(value, str):  # "[1, 20]" sent as text
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise _type_error(tool, name, "a list of integers", value) from None
        if not isinstance(value, list):
            raise _type_error(tool, name, "a list of integers", value)
        return [_integer(tool, name, item) for item in value]
    return value


def _editor_command(value: str) -> str:
    # Validated against every command the sandbox implements, not only the advertised enum.
    if value not in _ACCEPTED_EDITOR_COMMANDS:
        allowed = ", ".join(_SEED_EDITOR_COMMANDS)
        raise ToolArgumentError(
            f"Error: {value!r} is not a str_replace_editor command. Use one of: {allowed}."
        )
    return value


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


def _type_error(tool: str, name: str, expected: str, value: Any) -> ToolArgumentError:
    return ToolArgumentError(
        f"Error: parameter `{name}` of {tool} must be {expected}, got {_json_type(value)} "
        f"{_short_json(value)}."
    )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _short_json(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
