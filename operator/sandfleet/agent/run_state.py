"""RunState: everything an agent run has come to so far, in one place.

The loop holds one RunState and changes it turn by turn; resuming a run builds the whole
RunState from what the trajectory recorded (a ResumeState) instead of copying field by field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sandfleet.agent.config import AgentConfig
from sandfleet.agent.context_shortening import ObservationLedger
from sandfleet.agent.model import Model, Usage
from sandfleet.agent.results import TurnTiming
from sandfleet.agent.resume_types import ResumeState, transcript_messages


@dataclasses.dataclass(slots=True)
class RunState:
    """The loop's state between turns (changed in place as the run goes on)."""

    max_tokens: int | None
    """The completion budget; lowered when the endpoint rejects a request as too long."""
    transcript: list[Any] = dataclasses.field(default_factory=list)
    """What the model sees, as the model's own message items."""
    observations: ObservationLedger = dataclasses.field(default_factory=ObservationLedger)
    """Where each observation sits in the transcript (context shortening clips old ones)."""
    turns: int = 0
    """The turn the run is in (or ended in); 0 before the first."""
    usage: Usage = dataclasses.field(default_factory=Usage)
    model_time_s: float = 0.0
    tool_time_s: float = 0.0
    timings: list[TurnTiming] = dataclasses.field(default_factory=list)
    last_text: str | None = None
    """The model's last non-empty reply text (the answer when no answer file is written)."""
    nudges: int = 0
    """Replies in a row without a tool call (each got a nudge)."""
    answer_from_file: bool = False

    @classmethod
    def fresh(cls, config: AgentConfig) -> RunState:
        """The state of a run that has not started."""
        return cls(max_tokens=config.max_tokens)

    @classmethod
    def resumed(cls, recorded: ResumeState, config: AgentConfig, model: Model) -> RunState:
        """The state a recorded run had reached, with `model`'s transcript items. The
        smaller of the configured and the recorded completion budget holds."""
        max_tokens = config.max_tokens
        if recorded.max_tokens is not None and (
            max_tokens is None or recorded.max_tokens < max_tokens
        ):
            max_tokens = recorded.max_tokens
        observations = ObservationLedger()
        for index, entry in enumerate(recorded.transcript):
            if entry.call is not None:
                observations.add(index, entry.turn, entry.call, entry.text, clipped=entry.clipped)
        return cls(
            max_tokens=max_tokens,
            transcript=transcript_messages(recorded.transcript, model),
            observations=observations,
            turns=recorded.turns,
            usage=recorded.usage,
            model_time_s=recorded.model_time_s,
            tool_time_s=recorded.tool_time_s,
            timings=list(recorded.turn_timings),
            last_text=recorded.last_text,
            nudges=recorded.nudges,
        )
