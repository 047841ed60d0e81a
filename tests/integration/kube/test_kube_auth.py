"""What KubeClient really sends, against a real HTTP(S) server on 127.0.0.1 that stands in
for the API server (no real one runs in this tier; tests/cluster/test_kube_exec_auth.py
authenticates against the real one): the exec plugin's bearer token, one refresh and retry
after a 401 (requests and watches), a rotated token file picked up after a 401, and a client
certificate presented over TLS to a server that requires one."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from sandfleet.kube import KubeClient, KubeConfig, UnauthorizedError
from tests.support.kube_exec_plugin import ExecPlugin, write_kubeconfig

pytestmark = pytest.mark.integration

PATH = "/api/v1/namespaces/ns/configmaps"


class RecordingServer:
    """Answers 200 to the tokens in `accepted` (all when None), 401 to any other."""

    def __init__(self) -> None:
        self.accepted: set[str] | None = None
        self.authorizations: list[str | None] = []
        self.client_subjects: list[object] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        self.authorizations.append(authorization)
        assert request.transport is not None
        peer_cert = request.transport.get_extra_info("peercert")
        if peer_cert:
            self.client_subjects.append(peer_cert.get("subject"))
        if self.accepted is not None and authorization not in self.accepted:
            return web.json_response(
                {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "no"},
                status=401,
            )
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n')
            return response
        return web.json_response({"kind": "ConfigMapList", "apiVersion": "v1", "items": []})


async def _serve(
    recording: RecordingServer, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recording.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    recording.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    return runner


@pytest.fixture
async def server() -> AsyncIterator[RecordingServer]:
    recording = RecordingServer()
    runner = await _serve(recording)
    yield recording
    await runner.cleanup()


async def _load(tmp_path: Path, server: RecordingServer, user: dict[str, object]) -> KubeConfig:
    import asyncio

    path = write_kubeconfig(tmp_path / "config", server=server.url, user=user)
    return await asyncio.to_thread(KubeConfig.load, path)


async def test_the_exec_plugin_token_is_sent_and_a_401_refreshes_it_once(
    server: RecordingServer, tmp_path: Path
) -> None:
    plugin = ExecPlugin(tmp_path)
    config = await _load(tmp_path, server, plugin.user())  # run 1: exec-token-1
    server.accepted = {"Bearer exec-token-2"}  # the server no longer takes token 1

    async with KubeClient(config, timeout_s=5) as kube:
        assert await kube.list(PATH) == []
        assert await kube.list(PATH) == []

    assert server.authorizations == [
        "Bearer exec-token-1",  # rejected: 401
        "Bearer exec-token-2",  # the plugin ran once more; the call was sent again
        "Bearer exec-token-2",  # and the new token is kept
    ]
    assert plugin.runs == 2


async def test_a_token_the_server_keeps_rejecting_is_unauthorized_after_one_refresh(
    server: RecordingServer, tmp_path: Path
) -> None:
    plugin = ExecPlugin(tmp_path)
    config = await _load(tmp_path, server, plugin.user())
    server.accepted = set()

    async with KubeClient(config, timeout_s=5) as kube:
        with pytest.raises(UnauthorizedError):
            await kube.get(PATH)

    assert len(server.authorizations) == 2
    assert plugin.runs == 2


async def test_a_watch_rejected_with_401_refreshes_and_reconnects_once(
    server: RecordingServer, tmp_path: Path
) -> None:
    plugin = ExecPlugin(tmp_path)
    config = await _load(tmp_path, server, plugin.user())
    server.accepted = {"Bearer exec-token-2"}

    async with KubeClient(config, timeout_s=5) as kube:
        events = [event async for event in kube.watch(PATH, bookmarks=False)]

    assert [event.object["metadata"]["name"] for event in events] == ["a"]
    assert server.authorizations == ["Bearer exec-token-1", "Bearer exec-token-2"]


async def test_a_rotated_token_file_is_read_again_after_a_401(
    server: RecordingServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    config = await _load(tmp_path, server, {"tokenFile": str(token_file)})

    async with KubeClient(config, timeout_s=5) as kube:
        await kube.get(PATH)
        token_file.write_text("second-after-rotation\n")  # kubelet rotated it...
        server.accepted = {"Bearer second-after-rotation"}  # ...and the old one expired
        await kube.get(PATH)

    assert server.authorizations == [
        "Bearer first",
        "Bearer first",
        "Bearer second-after-rotation",
    ]


async def test_a_client_certificate_is_presented_to_a_server_that_requires_one(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.configure_trust(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED  # no client certificate: no handshake
    recording = RecordingServer()
    runner = await _serve(recording, server_context)
    client_cert = ca.issue_cert("alice@example", common_name="alice")
    try:
        user = {
            "client-certificate-data": _b64(client_cert.cert_chain_pems[0].bytes()),
            "client-key-data": _b64(client_cert.private_key_pem.bytes()),
        }
        cluster = {"certificate-authority-data": _b64(ca.cert_pem.bytes())}
        path = write_kubeconfig(
            tmp_path / "config", server=recording.url, user=user, cluster=cluster
        )
        config = KubeConfig.load(path)
        async with KubeClient(config, timeout_s=5) as kube:
            assert await kube.list(PATH) == []
    finally:
        await runner.cleanup()

    assert recording.authorizations == [None]
    assert len(recording.client_subjects) == 1
    assert (("commonName", "alice"),) in recording.client_subjects[0]  # type: ignore[operator]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
