"""Tool schemas (seed compatibility), argument checking, and dispatching a call to a sandbox."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sandfleet.agent import execute_tool_call
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet.tool_calls import ToolCall, ToolCallError, ToolSpec, parse_tool_call, tool_specs
from tests.support.agent_fakes import FakeSandbox

SPECS = tool_specs()


def call(name: str, arguments: str | dict[str, object]) -> ToolCall:
    return ToolCall("c1", name, arguments if isinstance(arguments, str) else json.dumps(arguments))


def parse_arguments(call: ToolCall, specs: Sequence[ToolSpec]) -> dict[str, Any]:
    """The canonical arguments of the parsed request, which is what reaches the sandbox."""
    return parse_tool_call(call.name, call.arguments, tools=specs).arguments()


def test_tools_come_in_the_seed_order_with_the_seed_parameters() -> None:
    specs = tool_specs(offer_undo_edit=False)
    assert [s.name for s in specs] == ["str_replace_editor", "execute_bash", "submit"]
    editor, bash, submit = (s.parameters for s in specs)
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert"]
    types = {name: prop["type"] for name, prop in editor["properties"].items()}
    assert types == {
        "command": "string",
        "path": "string",
        "file_text": "string",
        "old_str": "string",
        "new_str": "string",
        "insert_line": "integer",
        "view_range": "array",
    }
    assert editor["properties"]["view_range"]["items"] == {"type": "integer"}
    assert bash == {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": bash["properties"]["command"]["description"],
            }
        },
        "required": ["command"],
    }
    assert submit == {"type": "object", "properties": {}, "required": []}


def test_undo_edit_is_offered_unless_switched_off() -> None:
    assert tool_specs()[0].parameters["properties"]["command"]["enum"][-1] == "undo_edit"
    assert "undo_edit" in tool_specs()[0].description
    assert "undo_edit" not in tool_specs(offer_undo_edit=False)[0].description


def test_specs_are_shared_between_runs() -> None:
    assert tool_specs() is tool_specs()


def test_malformed_json_is_reported_to_the_model() -> None:
    with pytest.raises(ToolCallError, match=r"not valid JSON .* at character \d+"):
        parse_arguments(call("execute_bash", '{"command": "ls'), SPECS)


def test_arguments_that_are_not_an_object_are_reported() -> None:
    with pytest.raises(ToolCallError, match="must be a JSON object, got a list"):
        parse_arguments(call("execute_bash", "[1]"), SPECS)


def test_an_unknown_tool_gets_the_seeds_text() -> None:
    with pytest.raises(ToolCallError) as caught:
        parse_arguments(call("python", {"code": "1"}), SPECS)
    assert str(caught.value) == "Unknown action: python"


def test_a_missing_required_parameter_is_named() -> None:
    with pytest.raises(ToolCallError, match="needs the parameter `path`"):
        parse_arguments(call("str_replace_editor", {"command": "view"}), SPECS)


def test_a_parameter_of_the_wrong_type_is_reported() -> None:
    with pytest.raises(
        ToolCallError, match="`command` of execute_bash must be a string, got a number 5"
    ):
        parse_arguments(call("execute_bash", {"command": 5}), SPECS)


def test_an_unknown_editor_command_is_rejected() -> None:
    with pytest.raises(ToolCallError, match=r"Unrecognized command delete\. The allowed commands"):
        parse_arguments(call("str_replace_editor", {"command": "delete", "path": "/x"}), SPECS)


def test_undo_edit_is_accepted_even_when_not_advertised() -> None:
    specs = tool_specs(offer_undo_edit=False)
    parsed = parse_arguments(
        call("str_replace_editor", {"command": "undo_edit", "path": "/x"}), specs
    )
    assert parsed == {"command": "undo_edit", "path": "/x"}


def test_nulls_and_undeclared_parameters_are_dropped() -> None:
    parsed = parse_arguments(
        call(
            "str_replace_editor", {"command": "view", "path": "/a", "file_text": None, "extra": 1}
        ),
        SPECS,
    )
    assert parsed == {"command": "view", "path": "/a"}


def test_near_miss_types_are_coerced() -> None:
    # A typed request keeps only its command's fields, so each coercion gets its own call.
    inserted = parse_arguments(
        call(
            "str_replace_editor",
            {"command": "insert", "path": "/a", "insert_line": "3", "new_str": "x"},
        ),
        SPECS,
    )
    viewed = parse_arguments(
        call("str_replace_editor", {"command": "view", "path": "/a", "view_range": "[1, 5]"}),
        SPECS,
    )
    parsed = {**inserted, **viewed}
    assert parsed["insert_line"] == 3
    assert parsed["view_range"] == [1, 5]


def test_booleans_are_not_integers() -> None:
    with pytest.raises(
        ToolCallError, match="`insert_line` of str_replace_editor must be an integer"
    ):
        parse_arguments(
            call("str_replace_editor", {"command": "insert", "path": "/a", "insert_line": True}),
            SPECS,
        )


def test_empty_arguments_mean_no_arguments() -> None:
    assert parse_arguments(call("submit", ""), SPECS) == {}


async def test_a_call_that_fails_the_check_gets_the_message_and_never_reaches_the_sandbox() -> None:
    sandbox = FakeSandbox()
    output = await execute_tool_call(sandbox, call("execute_bash", "{not json"))
    assert output.startswith("Error: the arguments for execute_bash are not valid JSON")
    assert sandbox.tool_calls == []


async def test_a_checked_call_reaches_the_sandbox_with_the_coerced_arguments() -> None:
    sandbox = FakeSandbox()
    arguments = {"command": "view", "path": "/testbed", "view_range": "[1, 5]", "junk": None}
    output = await execute_tool_call(sandbox, call("str_replace_editor", arguments))
    assert output == "Execution output of \\[str_replace_editor]:\nview ok"
    assert sandbox.tool_calls == [
        ("str_replace_editor", {"command": "view", "path": "/testbed", "view_range": [1, 5]})
    ]


async def test_the_specs_decide_which_tools_exist() -> None:
    only_bash = [spec for spec in SPECS if spec.name == "execute_bash"]
    output = await execute_tool_call(
        FakeSandbox(), call("str_replace_editor", {"command": "view"}), specs=only_bash
    )
    assert output == "Unknown action: str_replace_editor"


async def test_a_tool_error_becomes_the_observation_and_a_lost_sandbox_raises() -> None:
    def refuse(sandbox: FakeSandbox, name: str, arguments: Mapping[str, object]) -> str:
        raise ToolError("path /x does not exist")

    refused = await execute_tool_call(FakeSandbox(refuse), call("execute_bash", {"command": "x"}))
    assert refused == "path /x does not exist"
    with pytest.raises(SandboxLostError):
        await execute_tool_call(
            FakeSandbox(lose_after_calls=0), call("execute_bash", {"command": "x"})
        )
