"""kopf's API client gets a bounded connection pool from our login handler.

A real HTTP server on 127.0.0.1 counts the client connections a burst of concurrent requests
opens: through kopf's own session (built from ConnectionInfo) every concurrent request opens
one — the operator's memory growth per session — and through the session our login hands
kopf at most `kopf_connection_limit` do. The session authenticates through the same
kubernetes_asyncio credentials as the operator's client: an exec plugin kubeconfig gives kopf
the plugin's token, fetched afresh at each login (kopf logs in again after a 401). The
OperatorContext is a stand-in (only `kube.config` and `settings.namespaces` are read),
declared as such below.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import kopf
import pytest
from aiohttp import web
from kopf._cogs.clients.auth import APIContext

from sandfleet.kube.config import KubeConfig
from sandfleet.operator.handlers import KOPF_REQUEST_CONNECTIONS, kopf_connection_limit, login
from tests.support.kube_exec_plugin import ExecPlugin, write_kubeconfig

BURST = 120


class CountingServer:
    """Answers every GET after a short pause; records each client connection and header."""

    def __init__(self) -> None:
        self.peers: set[tuple[str, int]] = set()
        self.authorizations: set[str | None] = set()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        self.authorizations.add(request.headers.get("Authorization"))
        await asyncio.sleep(0.1)  # long enough for the whole burst to overlap
        return web.json_response({"kind": "Status"})


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    counting = CountingServer()
    app = web.Application()
    app.router.add_get("/{tail:.*}", counting.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    counting.url = f"http://127.0.0.1:{port}"
    yield counting
    await runner.cleanup()


async def _burst(session: aiohttp.ClientSession, url: str) -> None:
    async def one(index: int) -> None:
        async with session.get(f"{url}/api/v1/namespaces/n/pods/p{index}") as response:
            assert response.status == 200
            await response.read()

    await asyncio.gather(*(one(i) for i in range(BURST)))


def _memo(url: str, namespaces: list[str], config: KubeConfig | None = None) -> Any:
    """Stand-in for OperatorContext: login reads only kube.config and settings.namespaces."""
    config = config or KubeConfig(server=url, token="operator-token")
    return SimpleNamespace(
        kube=SimpleNamespace(config=config), settings=SimpleNamespace(namespaces=namespaces)
    )


async def test_kopfs_own_session_opens_a_connection_per_concurrent_request(
    server: CountingServer,
) -> None:
    """Why login returns a session: kopf's default pool has no bound (kopf 1.45)."""
    context = APIContext(kopf.ConnectionInfo(server=server.url, token="t"))
    try:
        await _burst(context.session, server.url)
    finally:
        await context.close()
    assert len(server.peers) == BURST


async def test_the_login_session_bounds_kopfs_connections(server: CountingServer) -> None:
    # kopf's decorator types the handler for kopf's own calls.
    handler = cast(Callable[..., Awaitable[object]], login)
    credentials = await handler(memo=_memo(server.url, []))
    assert isinstance(credentials, kopf.AiohttpSession)
    assert credentials.server == server.url
    # kopf wraps it exactly as it does in the operator.
    context = APIContext(credentials)
    try:
        await _burst(context.session, server.url)
    finally:
        await context.close()
    assert len(server.peers) <= kopf_connection_limit([])
    assert server.authorizations == {"Bearer operator-token"}
    assert credentials.aiohttp_session.closed  # kopf's close reaches our session


def test_the_bound_leaves_room_for_every_watch_stream_and_the_requests() -> None:
    assert kopf_connection_limit([]) == 3 + 2 + KOPF_REQUEST_CONNECTIONS
    assert kopf_connection_limit(["a", "b", "c"]) == 9 + 2 + KOPF_REQUEST_CONNECTIONS


async def test_each_login_hands_kopf_a_fresh_token_from_the_exec_plugin(
    server: CountingServer, tmp_path: Path
) -> None:
    plugin = ExecPlugin(tmp_path)
    path = write_kubeconfig(tmp_path / "config", server=server.url, user=plugin.user())
    config = await asyncio.to_thread(KubeConfig.load, path)  # run 1, as the operator starts
    handler = cast(Callable[..., Awaitable[object]], login)

    for _ in range(2):  # the first login, then the one kopf makes after a 401
        credentials = await handler(memo=_memo(server.url, [], config))
        assert isinstance(credentials, kopf.AiohttpSession)
        async with credentials.aiohttp_session as session:
            await _burst(session, server.url)

    assert server.authorizations == {"Bearer exec-token-2", "Bearer exec-token-3"}
    assert plugin.runs == 3
