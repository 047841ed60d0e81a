"""RunState: a resume restores the run's whole state at once, from the recorded ResumeState."""

from __future__ import annotations

import dataclasses

from sandfleet.agent import AgentConfig, ToolCall
from sandfleet.agent.model import Usage
from sandfleet.agent.results import TurnTiming
from sandfleet.agent.resume_types import ResumeState, TranscriptEntry
from sandfleet.agent.run_state import RunState
from tests.support.agent_fakes import ScriptedModel

CALL = ToolCall("c1", "execute_bash", '{"command": "ls"}')
RECORDED = ResumeState(
    task_id="t", model="m", meta={},
    transcript=(
        TranscriptEntry("system", "sys", 0),
        TranscriptEntry("user", "do it", 0),
        TranscriptEntry("assistant", "", 1, tool_calls=(CALL,)),
        TranscriptEntry("tool", "a.txt\n" * 5000, 1, call=CALL),
    ),
    turns=1, usage=Usage(100, 20), model_time_s=1.5, tool_time_s=0.25,
    turn_timings=(TurnTiming(1, 1.5, 0.25, 0.0),), last_text="thinking", max_tokens=1500,
    submitted=False, lost_calls=(), synthesized=(), started_at=None, nudges=1,
)  # fmt: skip


def test_a_fresh_run_starts_from_nothing_with_the_configured_budget() -> None:
    state = RunState.fresh(AgentConfig(model="m", max_tokens=4096))
    assert (state.turns, state.usage, state.transcript, state.max_tokens) == (0, Usage(), [], 4096)


def test_a_resumed_state_is_the_recorded_run_whole() -> None:
    state = RunState.resumed(RECORDED, AgentConfig(model="m", max_tokens=4096), ScriptedModel([]))

    assert len(state.transcript) == 4
    assert (state.turns, state.usage, state.nudges) == (1, Usage(100, 20), 1)
    assert (state.model_time_s, state.tool_time_s, state.last_text) == (1.5, 0.25, "thinking")
    assert state.timings == [TurnTiming(1, 1.5, 0.25, 0.0)]
    assert state.max_tokens == 1500  # the recorded reduction holds
    _, clipped = state.observations.shorten(2, 0)  # the ledger knows the recorded observation
    assert [c.observation.index for c in clipped] == [3]


def test_the_smaller_budget_holds_whichever_side_it_comes_from() -> None:
    config = AgentConfig(model="m", max_tokens=1000)
    assert RunState.resumed(RECORDED, config, ScriptedModel([])).max_tokens == 1000
    unreduced = dataclasses.replace(RECORDED, max_tokens=None)
    assert RunState.resumed(unreduced, config, ScriptedModel([])).max_tokens == 1000
    unlimited = AgentConfig(model="m", max_tokens=None)
    assert RunState.resumed(RECORDED, unlimited, ScriptedModel([])).max_tokens == 1500
