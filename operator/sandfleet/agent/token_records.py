"""Token-faithful turns: what to ask an endpoint for, and the token ids and logprobs it sent.

Only what the endpoint itself returned is recorded; a part it did not send is marked
unavailable with the reason, never re-tokenised from the messages (that does not give the
ids the model saw). What the endpoint families return (as of late 2025):

- vLLM (>= 0.10.2): `return_token_ids: true` adds the response's top-level
  `prompt_token_ids` and each choice's `token_ids` (vllm/entrypoints/openai/protocol.py,
  ChatCompletionRequest.return_token_ids); `logprobs: true` gives choice.logprobs.content,
  one {token, logprob, bytes, top_logprobs} per completion token, in the same order as
  `token_ids`. With `return_tokens_as_token_ids` the token strings read "token_id:N".
- SGLang: `return_prompt_token_ids: true` puts `prompt_token_ids` on the choice
  (sglang/srt/entrypoints/openai/protocol.py, ChatCompletionResponseChoice); newer releases
  also fill the choice's `token_ids`; logprobs as OpenAI's.
- llama.cpp server: `logprobs: true` with `top_logprobs` >= 1 (it samples no probabilities
  at n_probs 0) gives content entries that also carry the token id as "id"
  (tools/server: completion_token_output::probs_vector_to_json); it returns no prompt ids
  on /v1/chat/completions.
- OpenAI: logprobs only, no ids (and it rejects unknown fields: do not record tokens there).

Unknown request fields are ignored by vLLM, SGLang and llama.cpp, so one request asks every
family in its own words.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sandfleet.trajectory.format import TOKENS_KIND

TOKEN_REQUEST_FIELDS: Mapping[str, Any] = {
    "logprobs": True,
    # 1, not 0: llama.cpp computes probabilities only for n_probs > 0.
    "top_logprobs": 1,
    "return_token_ids": True,  # vLLM: prompt_token_ids + choices[].token_ids
    "return_prompt_token_ids": True,  # SGLang: choices[].prompt_token_ids
}
"""Fields a token-recording request adds to the body (the user's extra_body wins)."""

_TOKEN_ID_PREFIX = "token_id:"


@dataclasses.dataclass(frozen=True, slots=True)
class TokenRecord:
    """One model turn's tokens as the endpoint returned them.

    A field is None when the endpoint did not send it; `unavailable` then says why, keyed
    by the field's name. `source` names the response field each present part came from.
    """

    prompt_ids: tuple[int, ...] | None
    completion_ids: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    """Logprob of each sampled completion token, aligned with completion_ids."""
    source: Mapping[str, str]
    unavailable: Mapping[str, str]

    def to_record(self, turn: int) -> dict[str, Any]:
        """The trajectory's `tokens` record of this turn."""
        return {
            "kind": TOKENS_KIND,
            "turn": turn,
            "prompt_ids": list(self.prompt_ids) if self.prompt_ids is not None else None,
            "completion_ids": (
                list(self.completion_ids) if self.completion_ids is not None else None
            ),
            "logprobs": list(self.logprobs) if self.logprobs is not None else None,
            "source": dict(self.source),
            "unavailable": dict(self.unavailable),
        }


def token_record(response: Any, choice: Any) -> TokenRecord:
    """The token ids and logprobs of a chat completion (an openai SDK object, whose fields
    beyond OpenAI's own are in `model_extra`). Never raises for missing or odd fields: a
    part that is not a well-formed list is recorded as unavailable."""
    source: dict[str, str] = {}
    unavailable: dict[str, str] = {}

    prompt_ids, prompt_problem = _ids(_extra(response, "prompt_token_ids"))
    prompt_from = "prompt_token_ids"
    if prompt_ids is None:
        prompt_ids, choice_problem = _ids(_extra(choice, "prompt_token_ids"))
        prompt_from = "choices[0].prompt_token_ids"
        prompt_problem = prompt_problem or choice_problem
    if prompt_ids is not None:
        source["prompt_ids"] = prompt_from
    else:
        unavailable["prompt_ids"] = prompt_problem or (
            "the endpoint returned no prompt_token_ids (vLLM needs return_token_ids, "
            "SGLang return_prompt_token_ids; llama.cpp's chat endpoint has none)"
        )

    entries = _logprob_entries(choice)
    completion_ids, completion_problem = _ids(_extra(choice, "token_ids"))
    if completion_ids is not None:
        source["completion_ids"] = "choices[0].token_ids"
    elif entries is not None:
        completion_ids = _entry_ids(entries)
        if completion_ids is not None:
            source["completion_ids"] = "choices[0].logprobs.content[].id"
    if completion_ids is None:
        unavailable["completion_ids"] = completion_problem or (
            "the endpoint returned no completion token ids (no choices[0].token_ids, and no "
            "token ids in the logprobs)"
        )

    logprobs = _entry_logprobs(entries) if entries is not None else None
    if logprobs is None:
        unavailable["logprobs"] = (
            "the endpoint returned no per-token logprobs"
            if entries is None
            else "the endpoint's logprobs are not one number per token"
        )
    elif completion_ids is not None and len(logprobs) != len(completion_ids):
        unavailable["logprobs"] = (
            f"the endpoint returned {len(logprobs)} logprobs for {len(completion_ids)} "
            "completion tokens"
        )
        logprobs = None
    else:
        source["logprobs"] = "choices[0].logprobs.content[].logprob"
    return TokenRecord(prompt_ids, completion_ids, logprobs, source, unavailable)


def _extra(obj: Any, name: str) -> Any:
    """A field of an SDK object that OpenAI's schema does not declare (None if absent)."""
    extra = getattr(obj, "model_extra", None)
    if isinstance(extra, Mapping) and name in extra:
        return extra[name]
    return getattr(obj, name, None) if not isinstance(obj, Mapping) else obj.get(name)


def _ids(value: Any) -> tuple[tuple[int, ...] | None, str | None]:
    """Token ids from a JSON list of non-negative ints, else None and (for a list of the
    wrong shape) the reason."""
    if value is None:
        return None, None
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        return None, f"the endpoint's token ids are not a list of token ids: {str(value)[:80]}"
    return tuple(value), None


def _logprob_entries(choice: Any) -> list[Any] | None:
    logprobs = getattr(choice, "logprobs", None)
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    return content if isinstance(content, list) else None


def _entry_ids(entries: Sequence[Any]) -> tuple[int, ...] | None:
    """Ids the logprob entries carry: llama.cpp's "id", SGLang's "token_id", or vLLM's
    "token_id:N" token strings; None unless every entry has one."""
    ids: list[int] = []
    for entry in entries:
        value = _extra(entry, "id")
        if value is None:
            value = _extra(entry, "token_id")
        if value is None:
            token = getattr(entry, "token", None)
            if isinstance(token, str) and token.startswith(_TOKEN_ID_PREFIX):
                digits = token.removeprefix(_TOKEN_ID_PREFIX)
                value = int(digits) if digits.isdigit() else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None
        ids.append(value)
    return tuple(ids)


def _entry_logprobs(entries: Sequence[Any]) -> tuple[float, ...] | None:
    values: list[float] = []
    for entry in entries:
        value = getattr(entry, "logprob", None)
        # Finite only: JSON has no NaN or infinity (llama.cpp already clamps log(0)).
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            return None
        values.append(float(value))
    return tuple(values)
