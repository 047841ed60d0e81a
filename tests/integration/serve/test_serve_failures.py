"""What goes wrong, answered as OpenAI error objects with the right status: bad input
(400 naming the field), an upstream down or sending garbage (502 naming the model), a
tenant over its limit (429 with Retry-After), and a client leaving mid-stream (the loop
cancelled, its sandbox released)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.serve.harness import (
    MODEL,
    RunningServer,
    free_port,
    raw_post,
    serving,
    write_config,
)
from tests.support.scripted_openai import Hang, Raw, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]

DOWN = "down"
LIMIT_BYTES = 65536


@pytest.fixture
async def limited(tmp_path: Path, upstream: ScriptedOpenAIServer) -> AsyncIterator[RunningServer]:
    """One request per tenant, small bodies, and a second model whose upstream is down."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = write_config(
        tmp_path, upstream.base_url,
        server=f"max_concurrent_per_tenant = 1\nmax_body_bytes = {LIMIT_BYTES}",
        extra=f"""
        [models.{DOWN}]
        upstream.base_url = "{dead}"
        upstream.model = "m"
        max_retries = 0
        warm = 0
        """,
    )  # fmt: skip
    async with serving(config) as running:
        yield running


def chat_body(content: object, **fields: object) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}
    ).encode()


def file_part(data: str, filename: str = "a.txt") -> dict[str, object]:
    return {"type": "file", "file": {"filename": filename, "file_data": data}}


BAD_REQUESTS = [
    (b"{not json", "body", "invalid_json"),
    (b"[1, 2]", "body", "invalid_json"),
    (b"x" * (LIMIT_BYTES + 1), "body", "request_too_large"),
    (json.dumps({"model": MODEL}).encode(), "messages", None),
    (json.dumps({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).encode(),
     "model", "model_not_found"),
    (chat_body("hi", temperature="hot"), "temperature", None),
    (json.dumps({"model": MODEL, "messages": "hi"}).encode(), "messages", None),
    (chat_body([file_part("%%%not base64")]), "messages[0].content[0].file.file_data",
     "invalid_file"),
    (chat_body([file_part(base64.b64encode(b"x").decode(), "../../etc/passwd")]),
     "messages[0].content[0].file.filename", "invalid_file"),
    (chat_body([{"type": "image_url", "image_url": {"url": "http://x"}}]),
     "messages[0].content[0].type", None),
    (json.dumps({"model": MODEL, "messages": [{"role": "assistant", "content": "hi"}]}).encode(),
     "messages[0].role", None),
]  # fmt: skip


async def test_every_bad_request_is_a_400_naming_its_field(limited: RunningServer) -> None:
    for body, param, code in BAD_REQUESTS:
        response = await raw_post(limited, "/chat/completions", body)
        assert response.status_code == 400, (param, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert (error["param"], error["code"]) == (param, code), response.text
        assert "Traceback" not in response.text
    for body, param in (
        ({"model": MODEL, "input": [{"type": "function_call_output"}]}, "input[0].type"),
        ({"model": MODEL, "input": 42}, "input"),
    ):
        response = await raw_post(limited, "/responses", json.dumps(body).encode())
        assert (response.status_code, response.json()["error"]["param"]) == (400, param)
    async with httpx.AsyncClient(base_url=limited.base_url) as http:
        unknown = await http.get("/nothing/here")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert limited.service.open_sandboxes() == 0  # no sandbox was started for any of them


async def test_an_upstream_down_or_sending_garbage_is_a_502_naming_the_model(
    upstream: ScriptedOpenAIServer, limited: RunningServer
) -> None:
    upstream.add(Raw(b"<html>502 bad gateway</html>", content_type="text/html"))
    async with limited.client() as client:
        with pytest.raises(openai.APIStatusError) as down:
            await client.chat.completions.create(
                model=DOWN, messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(openai.APIStatusError) as garbage:
            await client.responses.create(model=MODEL, input="hi", stream=True)
    assert down.value.status_code == 502
    assert "'down'" in down.value.message and "cannot reach" in down.value.message
    assert garbage.value.status_code == 502
    assert f"'{MODEL}'" in garbage.value.message
    assert await eventually(lambda: limited.service.open_sandboxes() == 0)  # released


async def test_a_tenant_at_its_limit_gets_429_with_retry_after(
    upstream: ScriptedOpenAIServer, limited: RunningServer
) -> None:
    release = asyncio.Event()
    upstream.add(Hang(release, then=Reply(text="done", tool_calls=[submit()])))
    async with limited.client() as client:
        first = asyncio.create_task(client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "slow"}]
        ))  # fmt: skip
        await upstream.wait_for_requests(1, timeout_s=60)
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "fast"}]
            )
        release.set()
        answered = await first
    assert refused.value.response.headers["retry-after"] == "1"
    assert refused.value.code == "rate_limit_exceeded"
    assert answered.choices[0].message.content == "done"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{limited.port}") as http:
        metrics = (await http.get("/metrics")).text
    assert f'sandfleet_serve_rate_limited_total{{model="{MODEL}"}} 1.0' in metrics
    assert (
        f'sandfleet_serve_requests_total{{endpoint="chat.completions",model="{MODEL}",'
        'status="429"} 1.0'
    ) in metrics


async def eventually(condition: Callable[[], bool], timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def processes_running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if entry.name.isdigit() and marker.encode() in command:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def test_a_client_leaving_mid_stream_cancels_the_loop_and_releases_the_sandbox(
    upstream: ScriptedOpenAIServer, limited: RunningServer
) -> None:
    marker = "sleep 31.25"
    upstream.add(Reply(tool_calls=[bash(marker)]), Reply(tool_calls=[submit()]))
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=60) as http:
        request = http.build_request(
            "POST", "/chat/completions", content=chat_body("wait", stream=True),
            headers={"content-type": "application/json"},
        )  # fmt: skip
        response = await http.send(request, stream=True)
        async for line in response.aiter_lines():
            if marker in line:  # the step has started: the command runs in the sandbox
                break
        assert limited.service.open_sandboxes() == 1  # the loop is in its tool call
        left = time.monotonic()
        await response.aclose()
    # Generous for a loaded machine; the printed time is what it took.
    service = limited.service
    assert await eventually(
        lambda: (
            not service.open_sandboxes()
            and not processes_running(marker)
            and not service.limiter.in_flight("local")
        )
    )
    print(f"sandbox released {time.monotonic() - left:.3f} s after the client left")


async def test_a_sandbox_lost_before_any_step_is_retried_on_a_new_one(
    tmp_path: Path, upstream: ScriptedOpenAIServer
) -> None:
    command = "mkdir -p output && wc -c < input/a.txt > output/answer.txt"
    upstream.add(Reply(tool_calls=[bash(command)]), Reply(tool_calls=[submit()]))
    state = tmp_path / "state"
    async with serving(write_config(tmp_path, upstream.base_url, warm=1)) as server:
        assert await eventually(lambda: server.service.warm_sandboxes() == 1)
        for pid in runtimes(state):  # the warm sandbox dies before a request takes it
            for child in children(pid):  # its PID 1: the whole namespace goes with it
                os.kill(child, signal.SIGKILL)
        assert await eventually(lambda: not runtimes(state))
        attachment = file_part(base64.b64encode(b"12345").decode())
        async with server.client() as client:
            answer = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": [attachment]}]
            )
        claims = server.service.metrics.registry.get_sample_value(
            "sandfleet_serve_sandbox_claim_seconds_count", {"model": MODEL}
        )
    assert claims == 2  # the dead warm one, then a new one
    assert answer.choices[0].message.content == "5"  # the file reached the new sandbox


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def runtimes(state_dir: Path) -> list[int]:
    """The sandboxes' processes: their command lines name the state dir."""
    return [pid for pid in processes_running(str(state_dir)) if pid != os.getpid()]
