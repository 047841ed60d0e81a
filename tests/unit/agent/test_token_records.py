"""Token ids and logprobs read out of chat completions as each server family returns them.

The responses are the openai SDK's own ChatCompletion objects built from JSON bodies shaped
like vLLM's, SGLang's and llama.cpp's (the integration tests get them over real HTTP).
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from sandfleet.agent.token_records import TOKEN_REQUEST_FIELDS, token_record


def completion(
    *, top: dict[str, Any] | None = None, choice: dict[str, Any] | None = None
) -> ChatCompletion:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                **(choice or {}),
            }
        ],
        **(top or {}),
    }
    return ChatCompletion.model_validate(body)


def logprobs(*values: float, ids: list[int] | None = None, tokens: list[str] | None = None) -> Any:
    entries = []
    for index, value in enumerate(values):
        entry: dict[str, Any] = {
            "token": tokens[index] if tokens else "x",
            "logprob": value,
            "bytes": [120],
            "top_logprobs": [],
        }
        if ids is not None:
            entry["id"] = ids[index]
        entries.append(entry)
    return {"content": entries}


def record_of(response: ChatCompletion) -> Any:
    return token_record(response, response.choices[0])


def test_vllm_return_token_ids_gives_prompt_and_completion_ids_with_logprobs() -> None:
    response = completion(
        top={"prompt_token_ids": [1, 2, 3]},
        choice={"token_ids": [7, 8], "logprobs": logprobs(-0.5, -1.25)},
    )
    record = record_of(response)
    assert record.prompt_ids == (1, 2, 3)
    assert record.completion_ids == (7, 8)
    assert record.logprobs == (-0.5, -1.25)
    assert record.unavailable == {}
    assert record.source == {
        "prompt_ids": "prompt_token_ids",
        "completion_ids": "choices[0].token_ids",
        "logprobs": "choices[0].logprobs.content[].logprob",
    }
    assert record.to_record(4) == {
        "kind": "tokens",
        "turn": 4,
        "prompt_ids": [1, 2, 3],
        "completion_ids": [7, 8],
        "logprobs": [-0.5, -1.25],
        "source": dict(record.source),
        "unavailable": {},
    }


def test_sglang_prompt_ids_on_the_choice_are_read() -> None:
    record = record_of(completion(choice={"prompt_token_ids": [5, 6], "token_ids": [9]}))
    assert record.prompt_ids == (5, 6)
    assert record.source["prompt_ids"] == "choices[0].prompt_token_ids"
    assert record.completion_ids == (9,)
    assert record.logprobs is None
    assert "no per-token logprobs" in record.unavailable["logprobs"]


def test_llama_cpp_ids_come_from_the_logprob_entries_and_the_prompt_is_unavailable() -> None:
    record = record_of(completion(choice={"logprobs": logprobs(-0.1, -0.2, ids=[42, 43])}))
    assert record.completion_ids == (42, 43)
    assert record.source["completion_ids"] == "choices[0].logprobs.content[].id"
    assert record.logprobs == (-0.1, -0.2)
    assert record.prompt_ids is None
    assert "prompt_token_ids" in record.unavailable["prompt_ids"]


def test_vllm_token_id_strings_give_the_ids() -> None:
    entries = logprobs(-1.0, -2.0, tokens=["token_id:11", "token_id:12"])
    record = record_of(completion(choice={"logprobs": entries}))
    assert record.completion_ids == (11, 12)


def test_an_endpoint_without_token_data_leaves_every_part_unavailable_with_a_reason() -> None:
    record = record_of(completion())
    assert (record.prompt_ids, record.completion_ids, record.logprobs) == (None, None, None)
    assert set(record.unavailable) == {"prompt_ids", "completion_ids", "logprobs"}
    assert all(reason for reason in record.unavailable.values())
    assert record.source == {}


@pytest.mark.parametrize(
    "bad", [[1, "2"], [1, -3], "1,2", [1.5], [True]], ids=["str", "neg", "text", "float", "bool"]
)
def test_malformed_ids_are_unavailable_not_guessed(bad: Any) -> None:
    record = record_of(completion(top={"prompt_token_ids": bad}, choice={"token_ids": bad}))
    assert record.prompt_ids is None and record.completion_ids is None
    assert "not a list of token ids" in record.unavailable["prompt_ids"]
    assert "not a list of token ids" in record.unavailable["completion_ids"]


def test_logprobs_that_do_not_match_the_ids_are_dropped_with_the_counts() -> None:
    record = record_of(completion(choice={"token_ids": [1, 2, 3], "logprobs": logprobs(-0.5)}))
    assert record.completion_ids == (1, 2, 3)
    assert record.logprobs is None
    assert record.unavailable["logprobs"] == (
        "the endpoint returned 1 logprobs for 3 completion tokens"
    )


def test_the_request_asks_every_family_in_its_own_words() -> None:
    assert TOKEN_REQUEST_FIELDS["logprobs"] is True
    assert TOKEN_REQUEST_FIELDS["top_logprobs"] >= 1  # llama.cpp samples none at 0
    assert TOKEN_REQUEST_FIELDS["return_token_ids"] is True
    assert TOKEN_REQUEST_FIELDS["return_prompt_token_ids"] is True
