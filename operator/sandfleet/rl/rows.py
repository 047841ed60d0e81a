"""An episode's token records as one training row, for a trainer's own loop over SandboxEnv.

The policy records each model turn's TokenRecord (sandfleet.agent.token_records: the ids
and logprobs the endpoint returned); `episode_row` chains them like `sandfleet export` does
for a recorded run, so the response mask is 1 exactly on model-generated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandfleet.agent.token_records import TokenRecord
from sandfleet.agent.training_rows import (
    RecordedTokens,
    TrainingRowsError,
    trajectory_row,
    turn_rows,
    turn_tokens,
)

__all__ = ["TrainingRowsError", "episode_row", "episode_turn_rows"]


def _recorded(
    records: Sequence[TokenRecord], task_id: str | None, stop_reason: str | None
) -> RecordedTokens:
    if not records:
        raise TrainingRowsError("the episode has no token records (no model turn recorded)")
    turns = tuple(turn_tokens(record.to_record(turn)) for turn, record in enumerate(records, 1))
    return RecordedTokens(task_id, stop_reason, turns)


def episode_row(
    records: Sequence[TokenRecord],
    *,
    reward: float | None = None,
    task_id: str | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """One verl-style row (prompt_ids, response_ids, response_mask, response_logprobs,
    reward) of the turns in order; TrainingRowsError when a turn lacks ids or the prompts
    do not chain (then use episode_turn_rows)."""
    return trajectory_row(_recorded(records, task_id, stop_reason), reward=reward)


def episode_turn_rows(
    records: Sequence[TokenRecord],
    *,
    reward: float | None = None,
    task_id: str | None = None,
    stop_reason: str | None = None,
) -> list[dict[str, Any]]:
    """One row per model turn (its own prompt and completion)."""
    return turn_rows(_recorded(records, task_id, stop_reason), reward=reward)
