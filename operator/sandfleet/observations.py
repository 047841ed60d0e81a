"""Tool-call arguments in, model-visible observation text out (LLM-in-Sandbox compatible).

The texts follow the seed project's observation strings, which the paper's models were
trained on, including the backslash-escaped section headers (`\\[STDOUT]`) that its
rich-markup escaping leaked into the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sandfleet.client import CommandResult

EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
_BASH_HEADER = "Execution output of \\[execute_bash]:"
_EDITOR_HEADER = "Execution output of \\[str_replace_editor]:"


class ArgumentError(ValueError):
    """Tool arguments the model got wrong; the message is the observation."""


def bash_observation(result: CommandResult) -> str:
    if result.timed_out:
        code = "-1"
    elif result.exit_code == 0:
        code = "0"
    else:
        code = f"Error: Exit code {result.exit_code}"
    text = f"Exit code: {code}\n{_BASH_HEADER}\n\\[STDOUT]\n{result.stdout}"
    if result.stderr.strip():
        text += f"\n\\[STDERR]\n{result.stderr}"
    if result.timed_out:
        text += (
            f"\n\\[NOTE]\nThe command timed out after {result.duration_s:.0f} seconds and its "
            "processes were killed. Run long jobs in the background with output redirected "
            "to a file (`cmd > log.txt 2>&1 &`)."
        )
    elif result.interrupted:
        text += "\n\\[NOTE]\nThe command was interrupted."
    elif result.shell_exited:
        text += (
            "\n\\[NOTE]\nThe command ended the shell; a fresh shell was started. Working "
            "directory, variables and functions from earlier commands are gone."
        )
    return text


def editor_observation(output: str) -> str:
    return f"{_EDITOR_HEADER}\n{output}"


def editor_error_observation(message: str) -> str:
    return f"{_EDITOR_HEADER}\nError: {message}"


def bash_command(arguments: Mapping[str, Any]) -> str:
    command = arguments.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ArgumentError("Error: No command provided.")
    return command


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ArgumentError(f"Parameter `{name}` must be an integer, got {value!r}.")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ArgumentError(f"Parameter `{name}` must be an integer, got {value!r}.")


def _view_range(value: Any) -> list[int] | None:
    if value is None or value == []:
        return None
    if isinstance(value, str):  # models sometimes send "[1, 20]" as text
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ArgumentError(
                f"Parameter `view_range` must be a list of two integers, got {value!r}."
            ) from None
    if not isinstance(value, list) or len(value) != 2:
        raise ArgumentError(
            f"Parameter `view_range` must be a list of two integers like [1, 20], got {value!r}."
        )
    return [_as_int("view_range", v) for v in value]


def editor_request(arguments: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Validate str_replace_editor arguments into (command, path, typed fields)."""
    command = arguments.get("command")
    path = arguments.get("path")
    if not command or not path or not isinstance(command, str) or not isinstance(path, str):
        raise ArgumentError("Parameters `command` and `path` are required.")
    if command not in EDITOR_COMMANDS:
        raise ArgumentError(
            f"Unrecognized command {command!r}. The allowed commands for the str_replace_editor "
            f"tool are: {', '.join(EDITOR_COMMANDS)}."
        )
    fields: dict[str, Any] = {}
    if command == "view":
        fields["view_range"] = _view_range(arguments.get("view_range"))
    elif command == "create":
        if not isinstance(arguments.get("file_text"), str):
            raise ArgumentError("Parameter `file_text` is required for command: create.")
        fields["file_text"] = arguments["file_text"]
    elif command == "str_replace":
        if not isinstance(arguments.get("old_str"), str):
            raise ArgumentError("Parameter `old_str` is required for command: str_replace.")
        new_str = arguments.get("new_str")
        if new_str is not None and not isinstance(new_str, str):
            raise ArgumentError("Parameter `new_str` must be a string.")
        fields.update(old_str=arguments["old_str"], new_str=new_str)
    elif command == "insert":
        if arguments.get("insert_line") is None:
            raise ArgumentError("Parameter `insert_line` is required for command: insert.")
        if not isinstance(arguments.get("new_str"), str):
            raise ArgumentError("Parameter `new_str` is required for command: insert.")
        fields.update(
            insert_line=_as_int("insert_line", arguments["insert_line"]),
            new_str=arguments["new_str"],
        )
    return command, path, fields
