"""SessionClient's follow loop against a scripted API server on 127.0.0.1: the list/watch
sequence a real API server only produces under churn (expired versions, ended streams)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sandfleet.api import Phase
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import SessionState
from sandfleet.kube import KubeClient, KubeConfig

pytestmark = pytest.mark.integration

SESSIONS = "/apis/sandfleet.dev/v1alpha1/namespaces/ns/sandboxsessions"


def session(version: str, phase: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxSession",
        "metadata": {"namespace": "ns", "name": "s", "uid": "u", "resourceVersion": version},
        "status": {"phase": phase} if phase else {},
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


EXPIRED = event(
    "ERROR",
    {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"},
)
HANG = object()
"""A watch script step: keep the stream open without sending anything."""


class ScriptedApiServer:
    """Answers lists and watches of one session collection from per-call scripts."""

    def __init__(self) -> None:
        self.lists: list[list[dict[str, Any]]] = []
        """One answer per list call: the items (resourceVersion "10" + call number)."""
        self.watches: list[list[Any]] = []
        """One script per watch call: events, or HANG."""
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.url = ""

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        watching = query.get("watch") == "true"
        self.requests.append(("WATCH" if watching else request.method, query))
        assert request.path == SESSIONS
        assert query.get("fieldSelector") == "metadata.name=s"
        if not watching:
            items = self.lists.pop(0)
            version = f"1{len(self.requests)}"
            return web.json_response({"items": items, "metadata": {"resourceVersion": version}})
        script = self.watches.pop(0) if self.watches else [HANG]
        response = web.StreamResponse()
        await response.prepare(request)
        for step in script:
            if step is HANG:
                await asyncio.Event().wait()
            await response.write(json.dumps(step).encode() + b"\n")
        await response.write_eof()
        return response

    def calls(self) -> list[str]:
        return [method for method, _ in self.requests]

    def watch_versions(self) -> list[str | None]:
        return [
            query.get("resourceVersion") for method, query in self.requests if method == "WATCH"
        ]


@pytest.fixture
async def server() -> AsyncIterator[ScriptedApiServer]:
    fake = ScriptedApiServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.dispatch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    await runner.cleanup()


@pytest.fixture
async def sessions(server: ScriptedApiServer) -> AsyncIterator[SessionClient]:
    async with KubeClient(KubeConfig(server=server.url, token="t"), timeout_s=5) as kube:
        yield SessionClient(kube, "ns")


async def collect(sessions: SessionClient, count: int, **kwargs: Any) -> list[SessionState]:
    seen: list[SessionState] = []
    async with contextlib.aclosing(sessions.states("s", **kwargs)) as states:
        async for state in states:
            seen.append(state)
            if len(seen) == count:
                break
    return seen


async def test_an_expired_watch_lists_again_and_goes_on_from_the_new_list(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    server.lists = [[session("3", "Pending")], [session("8", "Ready")]]
    server.watches = [[EXPIRED], [event("MODIFIED", session("9", "Succeeded"))]]

    seen = await collect(sessions, 3)

    assert [s.phase for s in seen] == [Phase.PENDING, Phase.READY, Phase.SUCCEEDED]
    assert server.calls() == ["GET", "WATCH", "GET", "WATCH"]
    assert server.watch_versions() == ["11", "13"]  # each watch starts at its list's version


async def test_an_ended_stream_is_watched_again_from_the_last_version_seen(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    server.lists = [[session("3", "Pending")]]
    server.watches = [
        [event("MODIFIED", session("4", "Starting")), event("BOOKMARK", session("7"))],
        [event("MODIFIED", session("8", "Ready"))],
    ]

    seen = await collect(sessions, 3)

    assert [s.phase for s in seen] == [Phase.PENDING, Phase.STARTING, Phase.READY]
    assert server.watch_versions() == ["11", "7"]  # a bookmark moves the version on too


async def test_following_from_a_created_state_watches_at_once_and_misses_nothing(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    created = SessionState.from_object(session("5"))
    server.watches = [[event("MODIFIED", session("6", "Pending"))]]

    seen = await collect(sessions, 2, since=created)

    assert [s.resource_version for s in seen] == ["5", "6"]
    assert server.calls() == ["WATCH"]
    assert server.watch_versions() == ["5"]


async def test_a_deleted_or_missing_session_ends_the_follow_with_session_gone(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    server.lists = [[session("3", "Running")], []]
    server.watches = [[event("DELETED", session("4", "Running"))]]

    with pytest.raises(SessionGoneError, match="ns/s was deleted"):
        await collect(sessions, 5)
    with pytest.raises(SessionGoneError, match="no SandboxSession ns/s"):
        await collect(sessions, 1)


async def test_wait_until_returns_the_first_matching_state(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    server.lists = [[session("3", "Pending")]]
    server.watches = [
        [event("MODIFIED", session("4", "Ready")), event("MODIFIED", session("5", "Running"))]
    ]

    state = await sessions.wait_until("s", lambda s: s.phase == Phase.READY, timeout_s=30)

    assert state.resource_version == "4"


async def test_wait_until_gives_up_with_the_last_state_it_saw(
    server: ScriptedApiServer, sessions: SessionClient
) -> None:
    server.lists = [[session("3", "Pending")]]
    server.watches = [[HANG]]

    with pytest.raises(SessionWaitTimeoutError, match="ns/s: phase Pending") as waited:
        await sessions.wait_until("s", lambda s: s.phase == Phase.READY, timeout_s=0.5)

    assert waited.value.state is not None and waited.value.state.resource_version == "3"
