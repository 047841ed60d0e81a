"""The Responses API from `sandfleet serve`: plain, streamed, a conversation continuing in
its sandbox, GET and DELETE, a file in and a generated file out."""

from __future__ import annotations

import base64

import httpx
import openai
import pytest

from tests.integration.serve.harness import MODEL, RunningServer
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]


def run_then_submit(command: str) -> list[Reply]:
    return [Reply(tool_calls=[bash(command)]), Reply(tool_calls=[submit()])]


async def test_response_items_are_the_steps_then_the_answer(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(*run_then_submit("mkdir -p output && echo 6 > output/answer.txt"))
    async with server.client() as client:
        response = await client.responses.create(model=MODEL, input="How many sides?")
        fetched = await client.responses.retrieve(response.id)
    assert response.status == "completed"
    assert response.output_text == "6"
    step, message = response.output
    assert step.type == "code_interpreter_call"
    assert step.code == "mkdir -p output && echo 6 > output/answer.txt"
    assert step.status == "completed" and step.outputs is not None
    assert message.type == "message"
    assert response.usage is not None and response.usage.total_tokens == 30
    assert fetched.id == response.id and fetched.output_text == "6"


async def test_streamed_response_sends_the_standard_events(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(*run_then_submit("mkdir -p output && echo streamed > output/answer.txt"))
    async with server.client() as client:
        stream = await client.responses.create(model=MODEL, input="go", stream=True)
        events = [event async for event in stream]
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[2:9] == [
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    assert types[9:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "streamed"


async def test_follow_up_runs_in_the_same_sandbox_until_deleted(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    upstream.add(*run_then_submit("echo kept-$RANDOM > notes.txt && mkdir -p output "
                                  "&& echo noted > output/answer.txt"))  # fmt: skip
    upstream.add(*run_then_submit("cp notes.txt output/answer.txt"))
    async with server.client() as client:
        first = await client.responses.create(model=MODEL, input="take a note")
        second = await client.responses.create(
            model=MODEL, input="what did you note?", previous_response_id=first.id
        )
        assert first.output_text == "noted"
        assert second.output_text.startswith("kept-")  # the first turn's file, still there
        assert second.previous_response_id == first.id
        # The second run was told about the first exchange.
        prompt = upstream.chat_requests[2].body["messages"][1]["content"]
        assert "take a note" in prompt and "noted" in prompt
        first_step, second_step = first.output[0], second.output[0]
        assert first_step.type == second_step.type == "code_interpreter_call"
        assert first_step.container_id == second_step.container_id
        assert len(server.service.store.conversations) == 1

        await client.responses.delete(second.id)
        assert server.service.store.conversations == {}  # the sandbox is released
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(second.id)
        with pytest.raises(openai.BadRequestError) as ended:
            await client.responses.create(model=MODEL, input="and now?",
                                          previous_response_id=first.id)  # fmt: skip
    assert ended.value.body["param"] == "previous_response_id"  # type: ignore[index]


async def test_a_file_in_and_a_generated_file_out(
    upstream: ScriptedOpenAIServer, server: RunningServer
) -> None:
    table = b"region,sales\nnorth,3\nsouth,4\n"
    upstream.add(*run_then_submit(
        "mkdir -p output && awk -F, 'NR>1 {s+=$2} END {print s}' input/sales.csv "
        "> output/answer.txt && sort -r input/sales.csv > output/sorted.csv"
    ))  # fmt: skip
    attachment = "data:text/csv;base64," + base64.b64encode(table).decode()
    async with server.client() as client:
        response = await client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [
                {"type": "input_text", "text": "Total sales?"},
                {"type": "input_file", "filename": "sales.csv", "file_data": attachment},
            ]}],
        )  # fmt: skip
    assert response.output_text == "7"
    files = (response.model_extra or {})["sandfleet"]["files"]
    assert [f["name"] for f in files] == ["answer.txt", "sorted.csv"]
    url = next(f["url"] for f in files if f["name"] == "sorted.csv")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
        download = await http.get(url)
        missing = await http.get(url.replace("sorted.csv", "%2E%2E/%2E%2E/etc/passwd"))
    assert download.status_code == 200
    assert download.content == b"south,4\nregion,sales\nnorth,3\n"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
    prompt = upstream.chat_requests[0].body["messages"][1]["content"]
    assert "sales.csv" in prompt
