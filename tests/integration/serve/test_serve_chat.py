"""Chat completions from `sandfleet serve`: the official `openai` client over real HTTP,
a scripted upstream over real HTTP, the loop in real local sandboxes."""

from __future__ import annotations

import socket

import pytest

from tests.integration.serve.harness import MODEL, RunningServer
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]


def answer_script(answer: str) -> list[Reply]:
    """Write `answer` to the answer file with one command, then submit."""
    return [
        Reply(tool_calls=[bash(f"mkdir -p output && echo {answer} > output/answer.txt")],
              prompt_tokens=100, completion_tokens=10),
        Reply(tool_calls=[submit()], prompt_tokens=130, completion_tokens=3),
    ]  # fmt: skip


async def test_chat_completion_is_the_loops_answer_with_usage(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(*answer_script("1267650600228229401496703205376"))
    async with server.client() as client:
        models = await client.models.list()
        completion = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is 2**100?"}]
        )
    assert [m.id for m in models.data] == [MODEL]
    choice = completion.choices[0]
    assert choice.message.content == "1267650600228229401496703205376"
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert completion.model == MODEL
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (230, 13)
    extension = (completion.model_extra or {})["sandfleet"]
    assert (extension["turns"], extension["tool_calls"]) == (2, 1)
    assert extension["stop_reason"] == "submitted"
    assert 0 < extension["environment_token_share"] < 1
    # The upstream ran the paper's loop: its tools, the user's question in the prompt.
    first = upstream.chat_requests[0].body
    assert {t["function"]["name"] for t in first["tools"]} >= {"execute_bash", "submit"}
    assert "What is 2**100?" in first["messages"][1]["content"]


async def test_streamed_chat_shows_steps_as_reasoning_then_the_answer(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(*answer_script("42"))
    async with server.client() as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "the answer?"}],
            stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0] for c in chunks if c.choices]
    reasoning = "".join((d.delta.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert "$ mkdir -p output && echo 42 > output/answer.txt" in reasoning
    assert "".join(d.delta.content or "" for d in deltas) == "42"
    assert not any(d.delta.tool_calls for d in deltas)
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["stop"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None and usage_chunk.usage.total_tokens == 243
    assert (usage_chunk.model_extra or {})["sandfleet"]["turns"] == 2


async def test_a_chat_conversation_header_keeps_the_sandbox(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(
        Reply(tool_calls=[bash("echo first-$RANDOM > kept.txt")]),
        Reply(text="saved", tool_calls=[submit()]),
        Reply(tool_calls=[bash("mkdir -p output && cp kept.txt output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    )
    async with server.client() as client:
        first = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "save something"}],
            extra_headers={"x-sandfleet-conversation": "new"},
        )  # fmt: skip
        conversation = first.headers["x-sandfleet-conversation"]
        second = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "save something"},
                      {"role": "assistant", "content": "saved"},
                      {"role": "user", "content": "what did you save?"}],
            extra_headers={"x-sandfleet-conversation": conversation},
        )  # fmt: skip
    assert conversation.startswith("conv_")
    assert first.headers["x-sandfleet-replica"] == socket.gethostname()  # who answered
    assert first.parse().choices[0].message.content == "saved"
    assert (second.choices[0].message.content or "").startswith("first-")
    assert (second.model_extra or {})["sandfleet"]["conversation_id"] == conversation
