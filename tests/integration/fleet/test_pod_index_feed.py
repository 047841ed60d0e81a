"""feed_pod_index over the real KubeClient against a small list/watch API server on 127.0.0.1:
list, watch (ADDED/MODIFIED/DELETED/BOOKMARK), a stream's end, 410 Gone and a relist."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from sandfleet.api import MANAGED_BY_VALUE, Component, Label, PodState
from sandfleet.fleet.pod_index import PodIndex, feed_pod_index
from sandfleet.kube import KubeClient, KubeConfig

pytestmark = pytest.mark.integration

TOKEN = "feed-token-0123456789"
SELECTOR = f"{Label.MANAGED_BY}={MANAGED_BY_VALUE},{Label.COMPONENT}={Component.SANDBOX}"
ANSWER_S = 10.0
"""Bound on waiting for the feed's next request: a hang fails the test instead of stalling."""

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]
Pod = dict[str, Any]


def pods_path(namespace: str | None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"


def pod(name: str, rv: int, *, ns: str = "team-a", state: PodState | None = None) -> Pod:
    labels = {Label.MANAGED_BY.value: MANAGED_BY_VALUE, Label.COMPONENT.value: Component.SANDBOX}
    if state is not None:
        labels |= {Label.POOL.value: "warm", Label.STATE.value: state.value}
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "labels": labels},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "podIP": "10.0.0.9"},
    }


class PodApi:
    """Serves scripted answers to pod lists and watches, per path, in order; once a path's
    script runs out its watches stay open and quiet, as an idle watch does."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Answer]] = {}
        self.watches: dict[str, list[Answer]] = {}
        self.seen: list[tuple[str, str, dict[str, str], str]] = []
        """(list | watch, path, query, Authorization header) of each request, in order."""
        self.changed = asyncio.Condition()
        self.closing = asyncio.Event()
        self.url = ""

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        kind = "watch" if request.query.get("watch") == "true" else "list"
        async with self.changed:
            auth = request.headers.get("Authorization", "")
            self.seen.append((kind, request.path, dict(request.query), auth))
            self.changed.notify_all()
        script = (self.watches if kind == "watch" else self.lists).get(request.path) or []
        answer = script.pop(0) if script else self.quiet_watch
        return await answer(request)

    async def quiet_watch(self, request: web.Request) -> web.StreamResponse:
        response = await open_stream(request)
        await self.closing.wait()
        return response

    def requests(self, kind: str, path: str) -> list[dict[str, str]]:
        return [query for k, p, query, _ in self.seen if (k, p) == (kind, path)]

    async def until_requests(self, kind: str, path: str, count: int) -> list[dict[str, str]]:
        async def arrived() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: len(self.requests(kind, path)) >= count)

        await asyncio.wait_for(arrived(), ANSWER_S)
        return self.requests(kind, path)


def listing(items: list[Pod], version: int) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }
        return web.json_response(body)

    return answer


def gated(gate: asyncio.Event, answer: Answer) -> Answer:
    """`answer`, held back until the test opens `gate`."""

    async def held(request: web.Request) -> web.StreamResponse:
        await gate.wait()
        return await answer(request)

    return held


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    return response


def stream(*events: tuple[str, Pod]) -> Answer:
    """A watch stream that sends `events`, one JSON object a line, then ends (as after the
    server's timeoutSeconds)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = await open_stream(request)
        for kind, obj in events:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        await response.write_eof()
        return response

    return answer


def bookmark(version: int) -> tuple[str, Pod]:
    return "BOOKMARK", {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(version)},
    }


EXPIRED = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Expired",
    "code": 410,
    "message": "too old resource version: 15 (20)",
}


def expired_in_stream() -> Answer:
    """How the API server ends an established watch whose version was compacted away."""
    return stream(("ERROR", EXPIRED))


def expired_answer() -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(EXPIRED, status=410)

    return answer


def failing(status: int) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = {"kind": "Status", "code": status, "reason": "InternalError", "message": "etcd"}
        return web.json_response(body, status=status)

    return answer


@pytest.fixture
async def api() -> AsyncIterator[PodApi]:
    fake = PodApi()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.dispatch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    fake.closing.set()
    await runner.cleanup()


@pytest.fixture
async def kube(api: PodApi, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "operator", "user": {"token": TOKEN}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {"cluster": "fake", "user": "operator", "namespace": "team-a"},
                    }
                ],
                "current-context": "fake",
            }
        )
    )
    async with KubeClient(KubeConfig.load(kubeconfig), timeout_s=5) as client:
        yield client


@contextlib.asynccontextmanager
async def feeding(
    kube: KubeClient, index: PodIndex, namespaces: list[str]
) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(feed_pod_index(kube, index, namespaces, retry_delay_s=0.01))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def state_of(index: PodIndex, name: str, ns: str = "team-a") -> tuple[str, str | None] | None:
    held = index.get(ns, name)
    if held is None:
        return None
    return held["metadata"]["resourceVersion"], held["metadata"]["labels"].get(Label.STATE)


async def test_the_index_follows_list_watch_and_a_relist_after_the_watch_expires(
    api: PodApi, kube: KubeClient
) -> None:
    path = pods_path("team-a")
    first_stream = asyncio.Event()
    api.lists[path] = [
        listing([pod("warm-a", 5, state=PodState.IDLE), pod("s-b", 6)], 10),
        listing([pod("warm-a", 12, state=PodState.CLAIMED), pod("s-c", 11), pod("s-d", 16)], 16),
    ]
    api.watches[path] = [
        gated(
            first_stream,
            stream(
                ("ADDED", pod("s-c", 11)),
                ("MODIFIED", pod("warm-a", 12, state=PodState.CLAIMED)),
                ("DELETED", pod("s-b", 13)),
                bookmark(15),
            ),
        ),
        expired_in_stream(),
    ]
    index = PodIndex()
    pool_signal = index.signal("team-a", "pool/warm")

    async with feeding(kube, index, ["team-a"]):
        (first_watch,) = await api.until_requests("watch", path, 1)
        # The first list is in before the watch starts, and only then is the index synced.
        assert index.synced.is_set()
        assert state_of(index, "warm-a") == ("5", PodState.IDLE)
        assert state_of(index, "s-b") == ("6", None)
        assert [p["metadata"]["name"] for p in index.pool_pods("team-a", "warm")] == ["warm-a"]
        assert first_watch["resourceVersion"] == "10"
        pool_signal.clear()

        first_stream.set()
        watches = await api.until_requests("watch", path, 3)

    assert state_of(index, "warm-a") == ("12", PodState.CLAIMED)
    assert state_of(index, "s-b") is None
    assert state_of(index, "s-c") == ("11", None)
    assert state_of(index, "s-d") == ("16", None)
    assert len(index) == 3
    assert pool_signal.is_set()  # the claim took warm-a out of its pool
    # The stream's end resumed from the bookmark; the 410 forced a relist, then a new watch.
    assert [w["resourceVersion"] for w in watches] == ["10", "15", "16"]
    assert len(api.requests("list", path)) == 2
    assert {q.get("labelSelector") for _, _, q, _ in api.seen} == {SELECTOR}
    assert {w.get("allowWatchBookmarks") for w in watches} == {"true"}
    assert {auth for _, _, _, auth in api.seen} == {f"Bearer {TOKEN}"}


async def test_the_index_is_synced_only_once_every_namespace_is_listed(
    api: PodApi, kube: KubeClient
) -> None:
    team_b_listed = asyncio.Event()
    api.lists[pods_path("team-a")] = [listing([pod("a1", 3)], 3)]
    api.lists[pods_path("team-b")] = [gated(team_b_listed, listing([pod("b1", 4, ns="team-b")], 4))]
    index = PodIndex()

    async with feeding(kube, index, ["team-a", "team-b"]):
        await api.until_requests("watch", pods_path("team-a"), 1)
        assert index.get("team-a", "a1") is not None
        assert not index.synced.is_set()

        team_b_listed.set()
        await asyncio.wait_for(index.synced.wait(), ANSWER_S)
        assert index.get("team-b", "b1") is not None


async def test_a_failed_list_is_retried_and_an_expired_watch_answer_forces_a_relist(
    api: PodApi, kube: KubeClient
) -> None:
    # No namespaces: one cluster-wide list and watch.
    path = pods_path(None)
    api.lists[path] = [
        failing(500),
        listing([pod("a1", 3), pod("b1", 4, ns="team-b")], 4),
        listing([pod("b1", 9, ns="team-b")], 9),
    ]
    api.watches[path] = [expired_answer()]
    index = PodIndex()

    async with feeding(kube, index, []):
        watches = await api.until_requests("watch", path, 2)

    assert index.synced.is_set()
    assert [w["resourceVersion"] for w in watches] == ["4", "9"]
    assert len(api.requests("list", path)) == 3
    assert index.get("team-a", "a1") is None
    assert state_of(index, "b1", ns="team-b") == ("9", None)
