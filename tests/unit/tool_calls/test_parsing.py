"""The one tool-call parser: typed requests, every error path, and the texts the model sees."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandfleet.tool_calls import (
    EDITOR_COMMANDS,
    BashRequest,
    CreateRequest,
    InsertRequest,
    StrReplaceRequest,
    SubmitRequest,
    ToolCallError,
    ToolRequest,
    UndoEditRequest,
    ViewRequest,
    offered_editor_commands,
    parse_tool_call,
    tool_specs,
)

EDITOR = "str_replace_editor"
BASH = "execute_bash"
HEADER = "Execution output of \\[str_replace_editor]:\n"


def error(name: str, arguments: str | dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(ToolCallError) as raised:
        parse_tool_call(name, arguments, **kwargs)
    return str(raised.value)


@pytest.mark.parametrize(
    ("name", "arguments", "request_"),
    [
        (BASH, {"command": "ls -l"}, BashRequest("ls -l")),
        (EDITOR, {"command": "view", "path": "/t"}, ViewRequest("/t")),
        (
            EDITOR,
            {"command": "view", "path": "/t", "view_range": [3, -1]},
            ViewRequest("/t", (3, -1)),
        ),
        (EDITOR, {"command": "create", "path": "/t/a", "file_text": ""}, CreateRequest("/t/a", "")),
        (
            EDITOR,
            {"command": "str_replace", "path": "/a", "old_str": "x", "new_str": "y"},
            StrReplaceRequest("/a", "x", "y"),
        ),
        (
            EDITOR,
            {"command": "str_replace", "path": "/a", "old_str": "x"},
            StrReplaceRequest("/a", "x"),
        ),
        (
            EDITOR,
            {"command": "insert", "path": "/a", "insert_line": 0, "new_str": "top\n"},
            InsertRequest("/a", 0, "top\n"),
        ),
        (EDITOR, {"command": "undo_edit", "path": "/a"}, UndoEditRequest("/a")),
        ("submit", {}, SubmitRequest()),
    ],
)
def test_each_tool_and_command_parses_into_its_typed_request(
    name: str, arguments: dict[str, Any], request_: ToolRequest
) -> None:
    assert parse_tool_call(name, arguments) == request_
    assert parse_tool_call(name, json.dumps(arguments)) == request_


def test_requests_are_frozen_and_their_arguments_parse_back_into_them() -> None:
    request = InsertRequest("/a", 2, "x")
    with pytest.raises(AttributeError):
        request.insert_line = 3  # type: ignore[misc]
    assert request.arguments() == {
        "command": "insert",
        "path": "/a",
        "insert_line": 2,
        "new_str": "x",
    }
    for sent in (
        {"command": "view", "path": "/a", "view_range": "[1, 20]"},
        {"command": "str_replace", "path": "/a", "old_str": "x", "new_str": None},
        {"command": "insert", "path": "/a", "insert_line": "4", "new_str": "x", "old_str": "y"},
    ):
        parsed = parse_tool_call(EDITOR, sent)
        assert parse_tool_call(EDITOR, parsed.arguments()) == parsed


def test_view_range_may_come_as_a_list_or_as_text() -> None:
    for view_range in ([1, 20], "[1, 20]", "[1,20]", ["1", " 20 "], [1.0, 20]):
        request = parse_tool_call(
            EDITOR, {"command": "view", "path": "/a", "view_range": view_range}
        )
        assert request == ViewRequest("/a", (1, 20)), view_range


def test_an_empty_or_null_view_range_means_the_whole_file() -> None:
    for view_range in ([], None, "[]"):
        request = parse_tool_call(
            EDITOR, {"command": "view", "path": "/a", "view_range": view_range}
        )
        assert request == ViewRequest("/a"), view_range


def test_a_view_range_that_is_not_two_integers_is_refused() -> None:
    assert error(EDITOR, {"command": "view", "path": "/a", "view_range": [1, 2, 3]}) == (
        HEADER + "Error: Parameter `view_range` must be a list of two integers like [1, 20], "
        "got [1, 2, 3]."
    )
    assert error(EDITOR, {"command": "view", "path": "/a", "view_range": "1-20"}) == (
        "Error: parameter `view_range` of str_replace_editor must be a list of integers, got a "
        'string "1-20".'
    )
    assert error(EDITOR, {"command": "view", "path": "/a", "view_range": {"start": 1}}) == (
        "Error: parameter `view_range` of str_replace_editor must be a list of integers, got an "
        'object {"start": 1}.'
    )
    assert error(EDITOR, {"command": "view", "path": "/a", "view_range": [1, "x"]}) == (
        'Error: parameter `view_range` of str_replace_editor must be an integer, got a string "x".'
    )


def test_integers_may_come_as_text_or_whole_floats_but_not_as_booleans() -> None:
    for line in ("7", " 7 ", 7.0, 7):
        request = parse_tool_call(
            EDITOR, {"command": "insert", "path": "/a", "insert_line": line, "new_str": "x"}
        )
        assert request == InsertRequest("/a", 7, "x"), line
    for line, shown in (
        (True, "a boolean true"),
        ("seven", 'a string "seven"'),
        (7.5, "a number 7.5"),
    ):
        arguments = {"command": "insert", "path": "/a", "insert_line": line, "new_str": "x"}
        expected = f"parameter `insert_line` of str_replace_editor must be an integer, got {shown}."
        assert error(EDITOR, arguments) == f"Error: {expected}"


def test_malformed_and_non_object_arguments() -> None:
    assert error(BASH, '{"command": "ls') == (
        "Error: the arguments for execute_bash are not valid JSON (Unterminated string starting "
        "at at character 12). Send the arguments as one JSON object."
    )
    assert (
        error(BASH, "[1]")
        == "Error: the arguments for execute_bash must be a JSON object, got a list."
    )
    assert (
        error(BASH, '"ls"')
        == "Error: the arguments for execute_bash must be a JSON object, got a string."
    )
    assert parse_tool_call("submit", "") == SubmitRequest()


def test_submit_ignores_whatever_comes_with_it() -> None:
    # The loop ends the run on the name alone; the parser agrees rather than refusing.
    assert parse_tool_call("submit", "{not json") == SubmitRequest()
    assert parse_tool_call("submit", {"answer": 42}) == SubmitRequest()


def test_missing_and_empty_bash_commands() -> None:
    # The seed's one text for a missing, null, empty or blank command.
    for arguments in ({}, {"command": None}, {"command": ""}, {"command": "  "}, ""):
        assert error(BASH, arguments) == "Error: No command provided."
    assert error(BASH, {"command": ["ls"]}) == (
        'Error: parameter `command` of execute_bash must be a string, got a list ["ls"].'
    )


def test_missing_editor_parameters_are_named() -> None:
    assert error(EDITOR, {"path": "/a"}) == (
        "Error: str_replace_editor needs the parameter `command`, which is missing."
    )
    assert error(EDITOR, {"command": "view"}) == (
        "Error: str_replace_editor needs the parameter `path`, which is missing."
    )
    assert error(EDITOR, {"command": "view", "path": ""}) == (
        HEADER + "Error: Parameters `command` and `path` are required."
    )
    cases = {
        ("create", "file_text"): {},
        ("str_replace", "old_str"): {"new_str": "x"},
        ("insert", "insert_line"): {"new_str": "x"},
        ("insert", "new_str"): {"insert_line": 1},
    }
    for (command, missing), extra in cases.items():
        arguments = {"command": command, "path": "/a", **extra}
        assert error(EDITOR, arguments) == (
            HEADER + f"Error: Parameter `{missing}` is required for command: {command}."
        )


def test_an_unknown_editor_command_gets_the_seeds_text() -> None:
    # The seed's and Anthropic's editor's words, listing every command the editor runs
    # (undo_edit is accepted even where the schema does not offer it).
    arguments = {"command": "delete", "path": "/x"}
    expected = (
        HEADER + "Error: Unrecognized command delete. The allowed commands for the "
        "str_replace_editor tool are: view, create, str_replace, insert, undo_edit"
    )
    assert error(EDITOR, arguments) == expected
    assert error(EDITOR, arguments, tools=tool_specs(offer_undo_edit=False)) == expected


def test_undo_edit_is_accepted_when_not_offered() -> None:
    parsed = parse_tool_call(
        EDITOR, {"command": "undo_edit", "path": "/x"}, tools=tool_specs(offer_undo_edit=False)
    )
    assert parsed == UndoEditRequest("/x")


def test_one_tuple_of_editor_commands_feeds_the_schema() -> None:
    assert EDITOR_COMMANDS == ("view", "create", "str_replace", "insert", "undo_edit")
    assert offered_editor_commands(offer_undo_edit=False) == EDITOR_COMMANDS[:4]
    for offer in (True, False):
        enum = tool_specs(offer_undo_edit=offer)[0].parameters["properties"]["command"]["enum"]
        assert tuple(enum) == offered_editor_commands(offer_undo_edit=offer)


def test_an_unknown_tool_gets_the_seeds_text() -> None:
    assert error("python", {"code": "1"}) == "Unknown action: python"
    only_bash = [spec for spec in tool_specs() if spec.name == BASH]
    assert error(EDITOR, {"command": "view", "path": "/a"}, tools=only_bash) == (
        "Unknown action: str_replace_editor"
    )


def test_nulls_and_undeclared_keys_are_dropped_but_declared_ones_are_type_checked() -> None:
    request = parse_tool_call(
        EDITOR, {"command": "view", "path": "/a", "file_text": None, "extra": object()}
    )
    assert request == ViewRequest("/a")
    # A field the command does not use is still checked: the schema declares its type.
    assert error(EDITOR, {"command": "view", "path": "/a", "insert_line": "x"}) == (
        'Error: parameter `insert_line` of str_replace_editor must be an integer, got a string "x".'
    )


def test_values_that_are_not_json_are_described_without_failing() -> None:
    # SDK callers hand over Python mappings; a stray object must still get a message.
    message = error(BASH, {"command": b"ls"})
    assert message.startswith(
        "Error: parameter `command` of execute_bash must be a string, got a bytes"
    )
    assert message.endswith(""" "b'ls'".""")
    request = parse_tool_call(EDITOR, {"command": "view", "path": "/a", "view_range": (1, 20)})
    assert request == ViewRequest("/a", (1, 20))
