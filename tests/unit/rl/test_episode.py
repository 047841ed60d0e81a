"""The environment's pure core: tool calls in either shape, step results as messages, ids."""

from __future__ import annotations

import pytest

from sandfleet.rl import EnvConfig, StepInfo, StepResult, command_id
from sandfleet.rl.episode import as_tool_call
from sandfleet.tool_calls import ToolCall


def test_a_chat_completions_tool_call_becomes_a_tool_call_with_its_arguments_as_json() -> None:
    call = as_tool_call(
        {"id": "c7", "function": {"name": "execute_bash", "arguments": {"command": "ls"}}}
    )
    assert call == ToolCall("c7", "execute_bash", '{"command": "ls"}')
    text = as_tool_call({"id": "c8", "function": {"name": "submit", "arguments": "{}"}})
    assert text == ToolCall("c8", "submit", "{}")
    unnamed = as_tool_call({"function": {"name": "submit"}})
    assert unnamed.call_id.startswith("call_") and unnamed.arguments == ""
    same = ToolCall("x", "submit", "{}")
    assert as_tool_call(same) is same


def test_a_tool_call_without_a_function_is_refused() -> None:
    with pytest.raises(ValueError, match="'function'"):
        as_tool_call({"id": "c", "name": "execute_bash"})


def test_a_step_result_unpacks_and_becomes_the_tool_message() -> None:
    result = StepResult("Exit code: 0", False, StepInfo(turn=1, tool="execute_bash", call_id="c1"))
    observation, done, info = result
    assert (observation, done, info.turn) == ("Exit code: 0", False, 1)
    assert result.message() == {"role": "tool", "tool_call_id": "c1", "content": "Exit code: 0"}


def test_command_ids_are_per_episode_and_turn() -> None:
    assert command_id("ep-1", 3) == "ep-1.t3"
    assert command_id("ep-1", 3) != command_id("ep-2", 3) != command_id("ep-1", 4)


@pytest.mark.parametrize("bad", [{"max_turns": 0}, {"reattach_attempts": -1}])
def test_the_config_refuses_impossible_bounds(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        EnvConfig(**bad)  # type: ignore[arg-type]
