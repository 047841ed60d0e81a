"""The operator's HTTP port on 127.0.0.1: metrics, streamed trajectories, errors, health."""

from __future__ import annotations

import hashlib
import json
import os
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import prometheus_client
import pytest
import yarl

from sandfleet.api.trajectories import UID_HEADER
from sandfleet.kube.access_review import Authenticator
from sandfleet.operator.http_api import NDJSON, RunningHttpServer, build_http_app, serve_http
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from sandfleet.trajectory.writer import TrajectoryWriter
from tests.support.gateway_api import running_api

pytestmark = pytest.mark.integration

UID_OLD = "7d3f0a52-0000-4c1b-8e0e-00000000000a"
UID_NEW = "7d3f0a52-0000-4c1b-8e0e-00000000000b"
BIG_BYTES = 20 * 1024 * 1024
MEMORY_BOUND_BYTES = 6 * 1024 * 1024
"""Well under the file's 20 MB: a handler that read the whole file could not stay below it."""


@pytest.fixture
def store(tmp_path: Path) -> DirectoryTrajectoryStore:
    return DirectoryTrajectoryStore(tmp_path / "trajectories")


@pytest.fixture
def registry() -> prometheus_client.CollectorRegistry:
    return prometheus_client.CollectorRegistry()


READER = "system:serviceaccount:team-a:reader"
AUTH = {"Authorization": "Bearer reader-token"}
"""A token the stand-in API server accepts, allowed to get sessions in team-a and /metrics
(the refusals are tests/integration/operator/test_attack_trajectory_access.py's)."""


@pytest.fixture
async def server(
    store: DirectoryTrajectoryStore, registry: prometheus_client.CollectorRegistry
) -> AsyncIterator[RunningHttpServer]:
    def render() -> tuple[bytes, str]:
        return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST

    async with running_api() as (api, kube):
        api.accept("reader-token", READER)
        api.allow(READER, "get", "team-a")
        api.allow_url(READER, "get", "/metrics")
        app = build_http_app(store, render, Authenticator(kube, server="the operator"))
        async with serve_http(app, "127.0.0.1", 0) as running:
            yield running


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=120), headers=AUTH
    ) as session:
        yield session


def write_run(store: DirectoryTrajectoryStore, uid: str, turns: int, *, age_s: float = 0) -> Path:
    path = store.writer_path("team-a", "session-1", uid)
    with TrajectoryWriter(path) as writer:
        writer.write({"kind": "meta", "task_id": uid})
        for turn in range(1, turns + 1):
            writer.write({"kind": "message", "turn": turn, "role": "assistant", "content": "hi"})
    if age_s:
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return path


def write_big_trajectory(path: Path, size: int) -> str:
    """About `size` bytes of records; returns the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        written, turn = 0, 0
        while written < size:
            turn += 1
            line = json.dumps({"kind": "observation", "turn": turn, "output": "z" * 4000}) + "\n"
            data = line.encode()
            handle.write(data)
            digest.update(data)
            written += len(data)
    return digest.hexdigest()


async def test_healthz_answers_ok(server: RunningHttpServer, client: aiohttp.ClientSession) -> None:
    async with client.get(server.url + "/healthz") as response:
        assert response.status == 200
        assert await response.text() == "ok"


async def test_metrics_serve_what_the_render_callable_returns(
    server: RunningHttpServer,
    client: aiohttp.ClientSession,
    registry: prometheus_client.CollectorRegistry,
) -> None:
    claims = prometheus_client.Counter(
        "sandfleet_test_claims", "claims", ["pool"], registry=registry
    )
    claims.labels(pool="warm").inc(3)

    async with client.get(server.url + "/metrics") as response:
        body = await response.text()
        assert response.status == 200
        assert response.headers["Content-Type"] == prometheus_client.CONTENT_TYPE_LATEST
    assert 'sandfleet_test_claims_total{pool="warm"} 3.0' in body.splitlines()

    claims.labels(pool="warm").inc()
    async with client.get(server.url + "/metrics") as response:
        assert 'sandfleet_test_claims_total{pool="warm"} 4.0' in (await response.text())


async def test_the_latest_run_is_served_as_ndjson_and_uid_selects_another(
    server: RunningHttpServer, client: aiohttp.ClientSession, store: DirectoryTrajectoryStore
) -> None:
    old = write_run(store, UID_OLD, turns=2, age_s=300)
    new = write_run(store, UID_NEW, turns=5)
    url = server.url + "/trajectories/team-a/session-1"

    async with client.get(url) as response:
        assert response.status == 200
        assert response.content_type == NDJSON
        assert response.headers[UID_HEADER] == UID_NEW
        assert response.content_length == new.stat().st_size
        assert await response.read() == new.read_bytes()

    async with client.get(url, params={"uid": UID_OLD}) as response:
        assert response.status == 200
        assert response.headers[UID_HEADER] == UID_OLD
        assert await response.read() == old.read_bytes()


async def test_head_tells_size_and_uid_and_the_connection_stays_usable(
    server: RunningHttpServer, client: aiohttp.ClientSession, store: DirectoryTrajectoryStore
) -> None:
    path = write_run(store, UID_OLD, turns=50)
    url = server.url + "/trajectories/team-a/session-1"
    connector = aiohttp.TCPConnector(limit=1)  # one connection: the GET reuses the HEAD's
    async with aiohttp.ClientSession(connector=connector, headers=AUTH) as one_connection:
        async with one_connection.head(url) as response:
            assert response.status == 200
            assert response.headers[UID_HEADER] == UID_OLD
            assert response.headers["Content-Length"] == str(path.stat().st_size)
            assert await response.read() == b""
        async with one_connection.get(url) as response:
            assert response.status == 200
            assert await response.read() == path.read_bytes()


async def test_a_record_being_appended_is_left_out_of_the_response(
    server: RunningHttpServer, client: aiohttp.ClientSession, store: DirectoryTrajectoryStore
) -> None:
    path = write_run(store, UID_OLD, turns=3)
    whole = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(b'{"kind": "observation", "output": "half')

    async with client.get(server.url + "/trajectories/team-a/session-1") as response:
        assert response.status == 200
        assert await response.read() == whole


async def test_a_20_mb_trajectory_streams_with_bounded_memory(
    server: RunningHttpServer, client: aiohttp.ClientSession, store: DirectoryTrajectoryStore
) -> None:
    expected = write_big_trajectory(store.writer_path("team-a", "big", UID_OLD), BIG_BYTES)
    digest = hashlib.sha256()
    received = 0
    tracemalloc.start()
    try:
        async with client.get(server.url + "/trajectories/team-a/big") as response:
            assert response.status == 200
            async for chunk in response.content.iter_chunked(64 * 1024):
                digest.update(chunk)
                received += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert received >= BIG_BYTES
    assert digest.hexdigest() == expected
    assert peak < MEMORY_BOUND_BYTES, f"peak traced memory {peak / 2**20:.1f} MiB"


async def test_a_reader_that_goes_away_mid_stream_leaves_the_server_serving(
    server: RunningHttpServer, store: DirectoryTrajectoryStore
) -> None:
    write_big_trajectory(store.writer_path("team-a", "big", UID_OLD), BIG_BYTES)
    async with aiohttp.ClientSession(headers=AUTH) as impatient:
        response = await impatient.get(server.url + "/trajectories/team-a/big")
        assert response.status == 200
        await response.content.read(1024)
        response.close()  # drops the connection with most of the body unread

    async with aiohttp.ClientSession(headers=AUTH) as client:
        async with client.get(server.url + "/healthz") as health:
            assert health.status == 200
        async with client.get(server.url + "/trajectories/team-a/big") as again:
            assert again.status == 200
            assert again.content_length is not None
            assert again.content_length >= BIG_BYTES


async def test_no_stored_trajectory_is_a_404_with_a_json_error(
    server: RunningHttpServer, client: aiohttp.ClientSession, store: DirectoryTrajectoryStore
) -> None:
    write_run(store, UID_OLD, turns=1)

    async with client.get(server.url + "/trajectories/team-a/other") as response:
        assert response.status == 404
        body = await response.json()
    assert body == {"error": "no trajectory stored for session team-a/other"}

    url = server.url + "/trajectories/team-a/session-1"
    async with client.get(url, params={"uid": UID_NEW}) as response:
        assert response.status == 404
        assert UID_NEW in (await response.json())["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/trajectories/Team-A/session-1",
        "/trajectories/team-a/Session_1",
        "/trajectories/team-a/%2E%2E",
        "/trajectories/%2E%2E/session-1",
        "/trajectories/team-a/session-1?uid=..%2F..%2Fetc",
        "/trajectories/team-a/session-1?uid=",
    ],
)
async def test_names_that_are_not_kubernetes_names_are_a_400(
    server: RunningHttpServer,
    client: aiohttp.ClientSession,
    store: DirectoryTrajectoryStore,
    path: str,
) -> None:
    write_run(store, UID_OLD, turns=1)

    # encoded=True: sent as written, without the client resolving the dot segments itself.
    async with client.get(yarl.URL(server.url + path, encoded=True)) as response:
        assert response.status == 400
        assert "invalid" in (await response.json())["error"]
