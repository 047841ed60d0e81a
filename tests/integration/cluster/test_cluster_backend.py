"""ClusterSandbox.open(ClusterBackend(...)) against a scripted API server on 127.0.0.1: the
request reaches the SandboxSession body, and a session that fails before Ready is deleted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sandfleet import ClusterBackend, ClusterSandbox, ClusterSandboxRequest, SessionFailedError
from sandfleet.kube import KubeClient, KubeConfig

pytestmark = pytest.mark.integration

SESSIONS = "/apis/sandfleet.dev/v1alpha1/namespaces/team-a/sandboxsessions"


def failed_session() -> dict[str, Any]:
    return {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxSession",
        "metadata": {"namespace": "team-a", "name": "sbx-abc", "resourceVersion": "2"},
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "TemplateNotFound",
                    "message": "SandboxTemplate team-a/missing not found",
                }
            ],
        },
    }


class SessionApi:
    """Creates one session, reports it Failed on the watch, and records what was asked."""

    def __init__(self) -> None:
        self.created: dict[str, Any] = {}
        self.deleted: list[str] = []
        self.url = ""

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.path == SESSIONS:
            self.created = await request.json()
            created = {**self.created, "metadata": {"namespace": "team-a", "name": "sbx-abc"}}
            created["metadata"]["resourceVersion"] = "1"
            return web.json_response(created, status=201)
        if request.method == "DELETE" and request.path.startswith(f"{SESSIONS}/"):
            self.deleted.append(request.path.rsplit("/", 1)[1])
            return web.json_response({"kind": "Status", "status": "Success"})
        assert request.method == "GET" and request.query.get("watch") == "true", request
        response = web.StreamResponse()
        await response.prepare(request)
        event = {"type": "MODIFIED", "object": failed_session()}
        await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response


@pytest.fixture
async def api() -> AsyncIterator[SessionApi]:
    fake = SessionApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.dispatch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    await runner.cleanup()


async def test_a_session_that_fails_before_ready_raises_and_is_deleted(api: SessionApi) -> None:
    async with KubeClient(KubeConfig(server=api.url, token="t"), timeout_s=5) as kube:
        with pytest.raises(SessionFailedError) as failed:
            request = ClusterSandboxRequest(
                "team-a",
                template="missing",
                env={"SEED": "7"},
                files={"input/notes.txt": "alpha\n"},
                kube=kube,
                ready_timeout_s=30,
            )
            await ClusterSandbox.open(ClusterBackend(request))

    assert "phase Failed" in str(failed.value) and "TemplateNotFound" in str(failed.value)
    assert failed.value.state is not None and failed.value.state.name == "sbx-abc"
    assert api.created["metadata"] == {"generateName": "sbx-"}
    spec = api.created["spec"]
    assert spec["templateRef"] == {"name": "missing"}
    assert spec["env"] == [{"name": "SEED", "value": "7"}]
    assert [entry["path"] for entry in spec["files"]] == ["input/notes.txt"]
    assert api.deleted == ["sbx-abc"]
