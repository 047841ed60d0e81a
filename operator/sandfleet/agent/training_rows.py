"""A finished trajectory's token records as training rows (verl-style prompt/response ids).

One row per trajectory ("rows"): `prompt_ids` is the first turn's prompt; `response_ids`
is everything after it, the model's completions and, between them, the tokens the
environment added (tool observations, nudges and the chat template around them) as the next
turn's prompt holds them; `response_mask` is 1 on model-generated tokens and 0 on the
others; `response_logprobs` the sampled tokens' logprobs (0.0 under mask 0). That needs
every turn's prompt to extend the previous prompt plus its completion token for token; when
it does not (a template that re-renders earlier turns, a shortened context), one row cannot
be faithful and the export says so. Per-turn rows ("turns": each turn's own prompt and
completion) need no such chain and are the fallback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from sandfleet.errors import SandfleetError
from sandfleet.trajectory.format import TOKENS_KIND

RowFormat = Literal["rows", "turns"]
ROW_FORMATS: tuple[RowFormat, ...] = ("rows", "turns")


class TrainingRowsError(SandfleetError, ValueError):
    """The trajectory cannot give faithful training rows; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class TurnTokens:
    """One model turn's complete token record."""

    turn: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedTokens:
    """What the export needs from a trajectory's records."""

    task_id: str | None
    stop_reason: str | None
    turns: tuple[TurnTokens, ...]


def recorded_tokens(records: Iterable[Mapping[str, Any]]) -> RecordedTokens:
    """The token record of every model turn, checked complete; TrainingRowsError when a
    turn has none or lacks its prompt or completion ids."""
    task_id: str | None = None
    stop_reason: str | None = None
    tokens: dict[int, Mapping[str, Any]] = {}
    replied: list[int] = []
    for record in records:
        kind = record.get("kind")
        if kind == "meta":
            task_id = _str_or_none(record.get("task_id"))
        elif kind == "result":
            stop_reason = _str_or_none(record.get("stop_reason"))
        elif kind == "message" and record.get("role") == "assistant":
            replied.append(_turn(record))
        elif kind == TOKENS_KIND:
            turn = _turn(record)
            if turn in tokens:
                raise TrainingRowsError(f"turn {turn} has two token records")
            tokens[turn] = record
    if not tokens:
        raise TrainingRowsError(
            "the trajectory has no token records: run it with --record-tokens "
            "(AgentConfig.record_tokens) against an endpoint that returns token ids "
            "(vLLM, SGLang)"
        )
    missing = [turn for turn in replied if turn not in tokens]
    if missing:
        raise TrainingRowsError(
            f"turn {missing[0]} has a model reply but no token record (was the run resumed "
            "without --record-tokens?)"
        )
    return RecordedTokens(
        task_id, stop_reason, tuple(turn_tokens(tokens[turn]) for turn in sorted(tokens))
    )


def trajectory_row(recorded: RecordedTokens, *, reward: float | None = None) -> dict[str, Any]:
    """The whole run as one row; TrainingRowsError when consecutive prompts do not chain."""
    first = recorded.turns[0]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] | None = []
    context = list(first.prompt_ids)
    for index, turn in enumerate(recorded.turns):
        if index > 0:
            between = _added_tokens(recorded.turns[index - 1], turn, context)
            response += between
            mask += [0] * len(between)
            if logprobs is not None:
                logprobs += [0.0] * len(between)
            context += between
        response += turn.completion_ids
        mask += [1] * len(turn.completion_ids)
        if logprobs is not None:
            logprobs = None if turn.logprobs is None else logprobs + list(turn.logprobs)
        context += turn.completion_ids
    return {
        "task_id": recorded.task_id,
        "turns": len(recorded.turns),
        "stop_reason": recorded.stop_reason,
        "prompt_ids": list(first.prompt_ids),
        "response_ids": response,
        "response_mask": mask,
        "response_logprobs": logprobs,
        "reward": reward,
    }


def turn_rows(recorded: RecordedTokens, *, reward: float | None = None) -> list[dict[str, Any]]:
    """One row per model turn: its own prompt and completion (every reply mask 1)."""
    return [
        {
            "task_id": recorded.task_id,
            "turn": turn.turn,
            "stop_reason": recorded.stop_reason,
            "prompt_ids": list(turn.prompt_ids),
            "response_ids": list(turn.completion_ids),
            "response_mask": [1] * len(turn.completion_ids),
            "response_logprobs": list(turn.logprobs) if turn.logprobs is not None else None,
            "reward": reward,
        }
        for turn in recorded.turns
    ]


def training_rows(
    records: Iterable[Mapping[str, Any]], row_format: RowFormat, *, reward: float | None = None
) -> list[dict[str, Any]]:
    """The rows of one trajectory in `row_format` ("rows": one; "turns": one per turn)."""
    recorded = recorded_tokens(records)
    if row_format == "rows":
        return [trajectory_row(recorded, reward=reward)]
    return turn_rows(recorded, reward=reward)


def _added_tokens(before: TurnTokens, turn: TurnTokens, context: list[int]) -> list[int]:
    """The tokens `turn`'s prompt adds after everything up to `before`'s completion."""
    prompt = turn.prompt_ids
    if len(prompt) < len(context) or list(prompt[: len(context)]) != context:
        at = next(
            (i for i, (a, b) in enumerate(zip(prompt, context, strict=False)) if a != b),
            min(len(prompt), len(context)),
        )
        raise TrainingRowsError(
            f"turn {turn.turn}'s prompt ids do not extend turn {before.turn}'s prompt and "
            f"completion (they differ at token {at} of {len(context)}): the chat template "
            "re-renders earlier turns (e.g. drops reasoning or the end token) or the context "
            "was shortened, so one row cannot be faithful; export per-turn rows "
            "(--format turns) instead"
        )
    return list(prompt[len(context) :])


def turn_tokens(record: Mapping[str, Any]) -> TurnTokens:
    """One `tokens` record (TokenRecord.to_record) checked complete; TrainingRowsError if not."""
    turn = _turn(record)
    unavailable = record.get("unavailable")
    reasons = unavailable if isinstance(unavailable, Mapping) else {}
    ids = {}
    for part in ("prompt_ids", "completion_ids"):
        value = record.get(part)
        if value is None:
            why = reasons.get(part) or "not recorded"
            raise TrainingRowsError(f"turn {turn} has no {part.replace('_', ' ')}: {why}")
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise TrainingRowsError(f"turn {turn}'s {part} is not a list of token ids")
        ids[part] = tuple(value)
    logprobs = record.get("logprobs")
    if logprobs is not None and (
        not isinstance(logprobs, list)
        or len(logprobs) != len(ids["completion_ids"])
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in logprobs)
    ):
        raise TrainingRowsError(f"turn {turn}'s logprobs are not one number per completion token")
    return TurnTokens(
        turn,
        ids["prompt_ids"],
        ids["completion_ids"],
        tuple(float(v) for v in logprobs) if logprobs is not None else None,
    )


def _turn(record: Mapping[str, Any]) -> int:
    turn = record.get("turn")
    if not isinstance(turn, int) or isinstance(turn, bool):
        raise TrainingRowsError(f"a {record.get('kind')} record has no turn number")
    return turn


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
