"""Issue #26 item 2, on the operator's real HTTP port (127.0.0.1) with the stand-in API server
answering its reviews: another tenant's trajectory, a name oracle and /metrics, as an attacker
asks for them. Before the fix every request here got a 200 or an informative 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from sandfleet.kube.access_review import Authenticator
from sandfleet.operator.http_api import RunningHttpServer, build_http_app, serve_http
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from sandfleet.trajectory.writer import TrajectoryWriter
from tests.support.gateway_api import StandInApiServer, running_api

pytestmark = pytest.mark.integration

UID = "7d3f0a52-0000-4c1b-8e0e-00000000000a"
VICTIM = "system:serviceaccount:team-a:trainer"
ATTACKER = "system:serviceaccount:team-b:trainer"
SCRAPER = "system:serviceaccount:monitoring:prometheus"


@pytest.fixture
async def operator_http(
    tmp_path: Path,
) -> AsyncIterator[tuple[RunningHttpServer, StandInApiServer]]:
    store = DirectoryTrajectoryStore(tmp_path / "trajectories")
    with TrajectoryWriter(store.writer_path("team-a", "secret-run", UID)) as writer:
        writer.write({"kind": "meta", "task_id": "t"})
        writer.write({"kind": "message", "role": "user", "content": "the victim's prompt"})

    def render() -> tuple[bytes, str]:
        return b'sandfleet_pool_idle{namespace="team-a",pool="warm"} 3\n', "text/plain"

    async with running_api() as (api, kube):
        api.accept("victim-token", VICTIM)
        api.accept("attacker-token", ATTACKER)
        api.accept("scraper-token", SCRAPER)
        api.allow(VICTIM, "get", "team-a")
        api.allow(ATTACKER, "get", "team-b")
        api.allow_url(SCRAPER, "get", "/metrics")
        app = build_http_app(store, render, Authenticator(kube, server="the operator"))
        async with serve_http(app, "127.0.0.1", 0) as running:
            yield running, api


async def _get(
    url: str, token: str | None = None, header: str = "Authorization"
) -> tuple[int, str]:
    headers = {header: f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as client, client.get(url, headers=headers) as response:
        return response.status, await response.text()


async def test_another_tenants_trajectory_and_its_name_are_not_revealed(
    operator_http: tuple[RunningHttpServer, StandInApiServer],
) -> None:
    server, _ = operator_http
    existing = server.url + "/trajectories/team-a/secret-run"
    unknown = server.url + "/trajectories/team-a/no-such-run"

    # No token, a made-up token: 401, whatever the name.
    for token in (None, "made-up"):
        answers = {await _get(url, token) for url in (existing, unknown)}
        assert {status for status, _ in answers} == {401}
        assert "victim's prompt" not in str(answers)

    # A valid token of another namespace: the existing name answers exactly as a missing one.
    status, body = await _get(existing, "attacker-token")
    missing_status, missing_body = await _get(unknown, "attacker-token")
    assert status == missing_status == 404
    assert body.replace("secret-run", "NAME") == missing_body.replace("no-such-run", "NAME")
    assert "victim's prompt" not in body

    # The rightful reader still gets it, through either header.
    for header in ("Authorization", "X-Sandfleet-Authorization"):
        status, body = await _get(existing, "victim-token", header)
        assert status == 200 and "victim's prompt" in body


async def test_metrics_want_the_metrics_reader_right_and_healthz_stays_open(
    operator_http: tuple[RunningHttpServer, StandInApiServer],
) -> None:
    server, api = operator_http
    assert (await _get(server.url + "/metrics"))[0] == 401
    status, body = await _get(server.url + "/metrics", "attacker-token")
    assert status == 403 and "pool=" not in body
    status, body = await _get(server.url + "/metrics", "scraper-token")
    assert status == 200 and 'pool="warm"' in body
    assert await _get(server.url + "/healthz") == (200, "ok")
    review = api.reviews[-1]["spec"]
    assert review["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
