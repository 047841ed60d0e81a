"""KubeClient against a scripted HTTP server on 127.0.0.1: the answers a real API server
gives only under load or failure (429, dropped watch streams, expired continue tokens,
silence, proxy error pages, token rotation)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sandfleet.kube import (
    GoneError,
    KubeApiError,
    KubeClient,
    KubeConfig,
    KubeConnectionError,
    WatchEvent,
    WatchExpiredError,
)

pytestmark = pytest.mark.integration

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PATH = "/api/v1/namespaces/ns/configmaps"


class FakeApiServer:
    """Serves one scripted handler for every path and remembers each request it saw."""

    def __init__(self) -> None:
        self.handler: Handler | None = None
        self.requests: list[web.Request] = []
        self.url = ""

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        assert self.handler is not None
        return await self.handler(request)


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.dispatch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    yield fake
    await runner.cleanup()


@pytest.fixture
async def kube(server: FakeApiServer) -> AsyncIterator[KubeClient]:
    async with KubeClient(KubeConfig(server=server.url, token="t0k3n"), timeout_s=5) as client:
        yield client


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "code": code,
        "reason": reason,
        "message": message,
    }


def event_line(event_type: str, name: str, version: str) -> bytes:
    obj = {"kind": "ConfigMap", "metadata": {"name": name, "resourceVersion": version}}
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


async def test_throttled_requests_are_retried_after_the_servers_retry_after(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if len(server.requests) < 3:
            body = status(429, "TooManyRequests", "slow down")
            return web.json_response(body, status=429, headers={"Retry-After": "0"})
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "a"}})

    server.handler = handler

    answer = await kube.get(f"{PATH}/a")

    assert answer["metadata"]["name"] == "a"
    assert len(server.requests) == 3
    assert {r.headers["Authorization"] for r in server.requests} == {"Bearer t0k3n"}


async def test_throttling_that_persists_ends_in_the_typed_error(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        body = status(429, "TooManyRequests", "slow down")
        return web.json_response(body, status=429, headers={"Retry-After": "0"})

    server.handler = handler

    with pytest.raises(KubeApiError, match="429 TooManyRequests: slow down"):
        await kube.get(f"{PATH}/a")
    assert len(server.requests) == 4  # the first try and three retries


async def test_a_proxy_error_page_becomes_an_api_error_with_its_text(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html")

    server.handler = handler

    with pytest.raises(KubeApiError, match=r"502 Unknown: <html>Bad Gateway</html>") as caught:
        await kube.create(PATH, {"metadata": {"name": "x"}})
    assert caught.value.status == 502


async def test_a_server_that_never_answers_times_out_as_a_connection_error(
    server: FakeApiServer,
) -> None:
    never = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        await never.wait()
        raise AssertionError("unreachable")

    server.handler = handler

    async with KubeClient(KubeConfig(server=server.url), timeout_s=0.3) as impatient:
        with pytest.raises(KubeConnectionError, match=f"GET {PATH}/a: no answer from"):
            await impatient.get(f"{PATH}/a")


async def test_a_closed_port_is_a_connection_error() -> None:
    # Bound but not listening: connections are refused, and nobody else can take the port.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        server = f"http://127.0.0.1:{held.getsockname()[1]}"
        async with KubeClient(KubeConfig(server=server)) as kube:
            with pytest.raises(KubeConnectionError, match=f"no answer from {re.escape(server)}"):
                await kube.get(PATH)


async def test_an_expired_continue_token_restarts_the_list_in_one_page(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        query = request.query
        if query.get("continue"):
            return web.json_response(status(410, "Expired", "continue too old"), status=410)
        if query.get("limit"):
            page = {
                "kind": "ConfigMapList",
                "apiVersion": "v1",
                "metadata": {"continue": "page-2", "resourceVersion": "10"},
                "items": [{"metadata": {"name": "cm-0"}}],
            }
            return web.json_response(page)
        items = [{"metadata": {"name": f"cm-{i}"}} for i in range(3)]
        full = {
            "kind": "ConfigMapList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "20"},
            "items": items,
        }
        return web.json_response(full)

    server.handler = handler

    items, version = await kube.list_with_version(PATH, label_selector="a=b", page_size=1)

    assert [i["metadata"]["name"] for i in items] == ["cm-0", "cm-1", "cm-2"]
    assert {(i["kind"], i["apiVersion"]) for i in items} == {("ConfigMap", "v1")}
    assert version == "20"
    assert [dict(r.query) for r in server.requests] == [
        {"labelSelector": "a=b", "limit": "1"},
        {"labelSelector": "a=b", "limit": "1", "continue": "page-2"},
        {"labelSelector": "a=b"},
    ]


async def test_a_gone_first_page_is_not_retried(server: FakeApiServer, kube: KubeClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(status(410, "Expired", "too old"), status=410)

    server.handler = handler

    with pytest.raises(GoneError):
        await kube.list(PATH)
    assert len(server.requests) == 1


async def stream(request: web.Request, chunks: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse()
    response.content_type = "application/json"
    await response.prepare(request)
    for chunk in chunks:
        await response.write(chunk)
    return response


async def test_a_dropped_watch_connection_ends_the_iteration_quietly(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = await stream(
            request,
            [event_line("ADDED", "a", "11"), event_line("MODIFIED", "a", "12"), b'{"type": "MOD'],
        )
        assert request.transport is not None
        request.transport.close()  # mid-chunk: the client sees a broken stream, not an end
        return response

    server.handler = handler

    events = [e async for e in kube.watch(PATH, resource_version="10", timeout_s=30)]

    assert events == [
        WatchEvent(
            "ADDED", {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "11"}}
        ),
        WatchEvent(
            "MODIFIED", {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "12"}}
        ),
    ]
    assert dict(server.requests[0].query) == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": "10",
        "timeoutSeconds": "30",
    }


async def test_an_expired_error_event_mid_stream_raises_watch_expired(
    server: FakeApiServer, kube: KubeClient
) -> None:
    gone = status(410, "Expired", "too old resource version: 10 (55)")

    async def handler(request: web.Request) -> web.StreamResponse:
        error = json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"
        return await stream(request, [event_line("ADDED", "a", "11"), error])

    server.handler = handler
    seen: list[WatchEvent] = []

    with pytest.raises(WatchExpiredError, match=r"410 Expired: too old resource version"):
        async for event in kube.watch(PATH, resource_version="10"):
            seen.append(event)
    assert [e.type for e in seen] == ["ADDED"]


async def test_a_watch_answered_with_410_raises_watch_expired(
    server: FakeApiServer, kube: KubeClient
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(status(410, "Gone", "resourceVersion too old"), status=410)

    server.handler = handler

    with pytest.raises(WatchExpiredError, match="resourceVersion too old"):
        async for _ in kube.watch(PATH, resource_version="1", bookmarks=False):
            pass
    assert "allowWatchBookmarks" not in server.requests[0].query


async def test_a_token_file_is_read_again_when_the_server_rejects_the_old_token(
    server: FakeApiServer, tmp_path: Path
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if (
            request.headers["Authorization"] == "Bearer first"
            and token_file.read_text() != "first\n"
        ):
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({})

    server.handler = handler
    token_file = tmp_path / "token"
    token_file.write_text("first\n")

    async with KubeClient(KubeConfig(server=server.url, token_file=token_file)) as kube:
        await kube.get(PATH)
        token_file.write_text("second-after-rotation\n")
        await kube.get(PATH)

    assert [r.headers["Authorization"] for r in server.requests] == [
        "Bearer first",
        "Bearer first",  # cached for a minute, like client-go; the 401 makes it read again
        "Bearer second-after-rotation",
    ]
