"""Training rows from token records: masks across tool turns, and the cases that cannot be
faithful (no records, a missing part, prompts that do not chain)."""

from __future__ import annotations

from typing import Any

import pytest

from sandfleet.agent.training_rows import TrainingRowsError, training_rows


def tokens(turn: int, prompt: list[int], completion: list[int], logprobs: Any = ...) -> dict:
    return {
        "kind": "tokens",
        "turn": turn,
        "prompt_ids": prompt,
        "completion_ids": completion,
        "logprobs": [-0.5] * len(completion) if logprobs is ... else logprobs,
        "source": {},
        "unavailable": {},
    }


def run(*turns: dict[str, Any], stop: str = "submitted") -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [{"kind": "meta", "task_id": "t-1", "record_tokens": True}]
    for turn in turns:
        records.append({"kind": "message", "turn": turn["turn"], "role": "assistant"})
        records.append({"kind": "usage", "turn": turn["turn"]})
        records.append(turn)
    records.append({"kind": "result", "task_id": "t-1", "stop_reason": stop})
    return records


# Turn 1's prompt, then per turn: the completion, then what the environment adds.
PROMPT = [100, 101, 102]
C1, OBS1 = [1, 2], [200, 201, 202]
C2, OBS2 = [3], [203]
C3 = [4, 5, 6]
THREE_TURNS = run(
    tokens(1, PROMPT, C1, [-0.1, -0.2]),
    tokens(2, PROMPT + C1 + OBS1, C2, [-0.3]),
    tokens(3, PROMPT + C1 + OBS1 + C2 + OBS2, C3, [-0.4, -0.5, -0.6]),
)


def test_one_row_masks_only_the_model_generated_tokens() -> None:
    [row] = training_rows(THREE_TURNS, "rows", reward=1.0)
    assert row["prompt_ids"] == [100, 101, 102]
    assert row["response_ids"] == [1, 2, 200, 201, 202, 3, 203, 4, 5, 6]
    assert row["response_mask"] == [1, 1, 0, 0, 0, 1, 0, 1, 1, 1]
    assert row["response_logprobs"] == [-0.1, -0.2, 0.0, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5, -0.6]
    assert row["reward"] == 1.0
    assert (row["task_id"], row["turns"], row["stop_reason"]) == ("t-1", 3, "submitted")


def test_per_turn_rows_hold_each_turns_own_prompt_and_completion() -> None:
    rows = training_rows(THREE_TURNS, "turns")
    assert [row["turn"] for row in rows] == [1, 2, 3]
    assert rows[1]["prompt_ids"] == PROMPT + C1 + OBS1
    assert rows[1]["response_ids"] == C2
    assert rows[2]["response_mask"] == [1, 1, 1]
    assert all(row["reward"] is None for row in rows)


def test_without_logprobs_in_one_turn_the_row_has_none() -> None:
    records = run(tokens(1, PROMPT, C1), tokens(2, PROMPT + C1 + OBS1, C2, None))
    [row] = training_rows(records, "rows")
    assert row["response_logprobs"] is None
    assert row["response_mask"] == [1, 1, 0, 0, 0, 1]


def test_prompts_that_do_not_chain_cannot_make_one_row_and_say_so() -> None:
    # Turn 2's template dropped a token of turn 1's completion (as templates that strip
    # reasoning do): one row would train on ids the model never saw.
    records = run(tokens(1, PROMPT, C1), tokens(2, [*PROMPT, 1, *OBS1], C2))
    with pytest.raises(TrainingRowsError) as caught:
        training_rows(records, "rows")
    message = str(caught.value)
    assert "turn 2's prompt ids do not extend turn 1's" in message
    assert "differ at token 4 of 5" in message
    assert "--format turns" in message
    assert len(training_rows(records, "turns")) == 2  # the fallback still works


def test_a_trajectory_without_token_records_is_refused() -> None:
    with pytest.raises(TrainingRowsError, match="no token records: run it with --record-tokens"):
        training_rows([{"kind": "meta"}, {"kind": "result"}], "rows")


def test_an_unavailable_part_is_refused_with_the_endpoints_reason() -> None:
    record = tokens(1, PROMPT, C1)
    record["prompt_ids"] = None
    record["unavailable"] = {"prompt_ids": "the endpoint returned no prompt_token_ids"}
    with pytest.raises(TrainingRowsError) as caught:
        training_rows(run(record), "turns")
    assert str(caught.value) == (
        "turn 1 has no prompt ids: the endpoint returned no prompt_token_ids"
    )


def test_a_reply_without_a_token_record_is_refused() -> None:
    records = run(tokens(1, PROMPT, C1))
    records.insert(-1, {"kind": "message", "turn": 2, "role": "assistant"})
    with pytest.raises(TrainingRowsError, match="turn 2 has a model reply but no token record"):
        training_rows(records, "rows")


def test_logprobs_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(TrainingRowsError, match="not one number per completion token"):
        training_rows(run(tokens(1, PROMPT, C1, [-0.1])), "rows")
