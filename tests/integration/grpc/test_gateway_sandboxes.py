"""Sandboxes through the gateway: session routing on every call shape, Sandbox.on_cluster,
on_cluster_many, connect_session, and SyncSandbox, all against a real runtime agent.

The gateway is the real one in-process (tests/support/client_gateway.py); its claim path
and the Kubernetes API server it asks are stand-ins, as no cluster runs here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet import (
    ClusterOptions,
    ClusterSandbox,
    GatewayAuthError,
    RuntimeClient,
    Sandbox,
    SyncSandbox,
    ToolError,
)
from sandfleet.api import GATEWAY_SESSION_METADATA
from tests.support.client_gateway import CALLER_TOKEN, ClientGateway, client_gateway
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ClientGateway]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with (
        running_runtime(workdir, default_timeout_s=20.0) as (runtime, token),
        client_gateway([(f"127.0.0.1:{runtime.port}", token)], str(workdir)) as gw,
    ):
        yield gw


def gateway_options(gateway: ClientGateway) -> dict[str, str]:
    return {"gateway": gateway.address, "token": CALLER_TOKEN}


async def test_every_call_shape_names_the_session_and_carries_the_session_token(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    gateway.add_session("s1")
    client = RuntimeClient(
        gateway.address,
        gateway.runtime_token,
        session="team-a/s1",
        caller_token=lambda: CALLER_TOKEN,
    )
    try:
        await client.run_command("echo hi > note.txt")  # unary
        chunks = [c async for c in client.stream_command("cat note.txt")]  # server stream
        remote = f"{gateway.workdir}/up.bin"
        await client.upload(b"payload", remote)  # client stream
        size = await client.download(remote, tmp_path / "down.bin")  # server stream
        await client.bind_session(gateway.runtime_token + "-rotated-x", session="team-a/s1")
        after = await client.stats()
    finally:
        await client.close()

    assert ("stdout", "hi\n") in chunks and size == 7
    assert (tmp_path / "down.bin").read_bytes() == b"payload"
    methods = [method.rsplit("/", 1)[1] for method, _ in gateway.proxied]
    assert methods == [
        "RunCommand", "StreamCommand", "UploadFile", "DownloadFile", "BindSession", "GetStats",
    ]  # fmt: skip
    assert all(md[GATEWAY_SESSION_METADATA] == "team-a/s1" for _, md in gateway.proxied)
    tokens = [md["authorization"] for _, md in gateway.proxied]
    assert tokens[:5] == [f"Bearer {gateway.runtime_token}"] * 5
    assert tokens[5] == f"Bearer {gateway.runtime_token}-rotated-x"  # rotated, still routed
    # The caller's Kubernetes token rides along on every call shape (the gateway checks it).
    callers = [md["x-sandfleet-authorization"] for _, md in gateway.proxied]
    assert callers == [f"Bearer {CALLER_TOKEN}"] * 6
    assert after.session == "team-a/s1"


async def test_a_direct_client_sends_no_routing_metadata(gateway: ClientGateway) -> None:
    client = RuntimeClient(gateway.address, gateway.runtime_token)
    try:
        with pytest.raises(ToolError, match="the call names no session"):
            await client.run_command("true")
    finally:
        await client.close()
    assert GATEWAY_SESSION_METADATA not in gateway.proxied[0][1]


async def test_on_cluster_claims_through_the_gateway_and_close_releases(
    gateway: ClientGateway,
) -> None:
    options = ClusterOptions(env={"A": "1"}, files={"input/x.txt": "x"}, ready_timeout_s=40)
    sandbox = await Sandbox.on_cluster(
        "team-a", pool="py312", options=options, **gateway_options(gateway)
    )
    async with sandbox:
        shell = await sandbox.call_tool("execute_bash", {"command": "echo routed; pwd"})

    assert isinstance(sandbox, ClusterSandbox)
    assert (sandbox.namespace, sandbox.name) == ("team-a", "sbx-0")
    assert f"routed\n{gateway.workdir}\n" in shell
    assert sandbox.paths.working_dir == gateway.workdir
    assert gateway.methods() == ["Claim", "Release"]
    claim, release = gateway.calls[0][1], gateway.calls[1][1]
    assert (claim.pool, claim.count, claim.generate_name, claim.timeout_seconds) == (
        "py312", 1, "sbx-", 40,
    )  # fmt: skip
    assert list(release.names) == ["sbx-0"] and not gateway.sessions


async def test_many_sandboxes_come_from_one_claim_and_each_close_releases_its_own(
    gateway: ClientGateway,
) -> None:
    sandboxes = await Sandbox.on_cluster_many(3, "team-a", pool="py312", **gateway_options(gateway))
    outputs = await asyncio.gather(*(s.bash("echo $((6*7))") for s in sandboxes))
    await sandboxes[0].close()
    assert sorted(gateway.sessions) == ["team-a/sbx-1", "team-a/sbx-2"]
    for sandbox in sandboxes[1:]:
        await sandbox.close()

    assert [o.stdout for o in outputs] == ["42\n"] * 3
    assert gateway.methods() == ["Claim", "Release", "Release", "Release"]
    assert gateway.calls[0][1].count == 3


async def test_connect_session_reaches_an_existing_session_and_leaves_it(
    gateway: ClientGateway,
) -> None:
    gateway.add_session("made-by-kubectl")
    sandbox = await Sandbox.connect_session("made-by-kubectl", "team-a", **gateway_options(gateway))
    async with sandbox:
        result = await sandbox.bash("echo attached")

    assert result.stdout == "attached\n"
    assert gateway.methods() == ["Connect"]
    assert "team-a/made-by-kubectl" in gateway.sessions


async def test_a_refused_claim_raises_the_auth_error(gateway: ClientGateway) -> None:
    with pytest.raises(GatewayAuthError):
        await Sandbox.on_cluster("team-a", gateway=gateway.address, token="wrong")


async def test_sync_sandboxes_through_the_gateway(gateway: ClientGateway, tmp_path: Path) -> None:
    options = gateway_options(gateway)

    def use() -> tuple[str, str, bytes, list[str]]:
        with SyncSandbox.on_cluster("team-a", pool="py312", **options) as sandbox:
            seen = sandbox.call_tool("execute_bash", {"command": "echo sync"})
            sandbox.upload(b"data", f"{gateway.workdir}/file.bin")
            sandbox.download(f"{gateway.workdir}/file.bin", tmp_path / "back.bin")
            ran = sandbox.bash("cat file.bin").stdout
            sandbox.upload(b"data", f"{gateway.workdir}/file.bin")
            sandbox.download(f"{gateway.workdir}/file.bin", tmp_path / "back.bin")
            ran = sandbox.bash("cat file.bin").stdout
        many = SyncSandbox.on_cluster_many(2, "team-a", **options)
        names = [s.sandbox.name for s in many]  # type: ignore[attr-defined]
        for each in many:
            each.close()
            each.close()  # a second close does nothing
        return seen, ran, (tmp_path / "back.bin").read_bytes(), names

    seen, ran, downloaded, names = await asyncio.to_thread(use)

    assert "sync\n" in seen and ran == "data" and downloaded == b"data"
    assert names == ["sbx-0", "sbx-1"]
    assert gateway.methods() == ["Claim", "Release", "Claim", "Release", "Release"]
    assert not gateway.sessions
