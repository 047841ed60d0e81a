"""GatewayClient and gateway-routed RuntimeClients against a real grpc.aio server on 127.0.0.1.

The server is tests/support/gateway_standin.py: a stand-in for the gateway (g1 writes the
real one) serving the real GatewayService API and proxying to a real runtime agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trustme

from sandfleet.api import LifecycleSpec
from sandfleet.client import RuntimeClient
from sandfleet.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayStartError,
    GatewayUnreachableError,
    QuotaExceededError,
    SandboxStartError,
)
from sandfleet.gateway_client import GatewayClient
from sandfleet.grpc_channel import Tls
from tests.support.gateway_standin import CALLER_TOKEN, Failure, GatewayStandIn
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayStandIn]:
    async with running_runtime(tmp_path, default_timeout_s=20.0) as (runtime, token):
        standin = GatewayStandIn(f"127.0.0.1:{runtime.port}", token, str(tmp_path))
        await standin.start()
        yield standin
        await standin.stop()


async def test_claim_connect_release_carry_the_token_and_the_request(
    gateway: GatewayStandIn,
) -> None:
    async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
        claimed = await client.claim(
            "team-a", pool="py312", count=2, env={"SEED": "7"},
            files={"input/a.txt": "alpha", "/data/b.bin": b"\x00\x01"},
            lifecycle=LifecycleSpec(idle_timeout_seconds=60), generate_name="rl-",
            egress="internet", timeout_s=45,
        )  # fmt: skip
        connected = await client.connect("team-a", claimed[1].name, timeout_s=5)
        released = await client.release("team-a", [s.name for s in claimed] + ["gone"])

    assert [s.session for s in claimed] == ["team-a/rl-1", "team-a/rl-2"]
    assert all(s.warm and s.token == gateway.runtime_token for s in claimed)
    assert connected == claimed[1]
    assert released == 2
    assert gateway.methods() == ["Claim", "Connect", "Release"]
    assert all(md["authorization"] == f"Bearer {CALLER_TOKEN}" for _, _, md in gateway.calls)
    request = gateway.calls[0][1]
    assert (request.namespace, request.pool, request.template, request.count) == (
        "team-a", "py312", "", 2,
    )  # fmt: skip
    assert dict(request.env) == {"SEED": "7"}
    assert [(f.path, f.content) for f in request.files] == [
        ("input/a.txt", b"alpha"), ("/data/b.bin", b"\x00\x01"),
    ]  # fmt: skip
    assert request.lifecycle.idle_timeout_seconds == 60
    assert (request.generate_name, request.egress, request.timeout_seconds) == (
        "rl-", "Internet", 45,
    )  # fmt: skip
    assert gateway.calls[1][1].timeout_seconds == 5


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, GatewayAuthError),
        (grpc.StatusCode.PERMISSION_DENIED, GatewayAuthError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, QuotaExceededError),
        (grpc.StatusCode.UNAVAILABLE, GatewayStartError),
        (grpc.StatusCode.NOT_FOUND, GatewayError),
        (grpc.StatusCode.INVALID_ARGUMENT, GatewayError),
    ],
)
async def test_each_status_becomes_its_error_with_the_gateways_message(
    gateway: GatewayStandIn, code: grpc.StatusCode, error_class: type[GatewayError]
) -> None:
    gateway.failures["Claim"] = Failure(code, "team-a has 10 of its 10 sessions")
    async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
        with pytest.raises(error_class) as raised:
            await client.claim("team-a", pool="py312")

    assert type(raised.value) is error_class
    assert raised.value.code == code.name
    assert "team-a has 10 of its 10 sessions" in str(raised.value)
    assert gateway.address in str(raised.value)
    # A Claim the gateway answered is never repeated: it may have started sandboxes.
    assert gateway.methods() == ["Claim"]


async def test_a_start_failure_is_a_sandbox_start_error_too(gateway: GatewayStandIn) -> None:
    gateway.failures["Claim"] = Failure(grpc.StatusCode.UNAVAILABLE, "no sandbox in 30s")
    async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
        with pytest.raises(SandboxStartError):
            await client.claim("team-a")


async def test_a_wrong_token_is_refused_as_an_auth_error(gateway: GatewayStandIn) -> None:
    async with GatewayClient(gateway.address, "someone-else") as client:
        with pytest.raises(GatewayAuthError, match="the token is not valid"):
            await client.claim("team-a")
    assert gateway.calls[0][2]["authorization"] == "Bearer someone-else"


async def test_release_and_connect_are_retried_after_unavailable_claim_is_not(
    gateway: GatewayStandIn,
) -> None:
    async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
        (claimed,) = await client.claim("team-a")
        gateway.failures["Connect"] = Failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        gateway.failures["Release"] = Failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        assert (await client.connect("team-a", claimed.name)).name == claimed.name
        assert await client.release("team-a", [claimed.name]) == 1

    assert gateway.methods() == ["Claim", "Connect", "Connect", "Release", "Release"]


async def test_an_unreachable_gateway_is_named_in_the_error() -> None:
    async with GatewayClient("127.0.0.1:9", CALLER_TOKEN) as client:
        with pytest.raises(GatewayUnreachableError) as raised:
            await client.claim("team-a")
    message = str(raised.value)
    assert "no gateway answers at 127.0.0.1:9" in message
    assert "SANDFLEET_GATEWAY" in message


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def test_tls_with_a_private_ca_bundle(tmp_path: Path, ca: trustme.CA) -> None:
    certificate = ca.issue_cert("127.0.0.1", "gateway.test")
    tls_pair = (certificate.cert_chain_pems[0].bytes(), certificate.private_key_pem.bytes())
    async with running_runtime(tmp_path) as (runtime, token):
        gateway = GatewayStandIn(f"127.0.0.1:{runtime.port}", token, str(tmp_path))
        await gateway.start(tls=tls_pair)
        trusted = Tls(root_certificates=ca.cert_pem.bytes())
        try:
            async with GatewayClient(gateway.address, CALLER_TOKEN, tls=trusted) as client:
                (claimed,) = await client.claim("team-a")
            # The data plane rides the same TLS channel settings.
            runtime_client = RuntimeClient(
                gateway.address, claimed.token, session=claimed.session, tls=trusted
            )
            try:
                result = await runtime_client.run_command("echo over-tls")
            finally:
                await runtime_client.close()
            # Another CA's bundle does not verify the gateway; nor does plaintext reach it.
            other = Tls(root_certificates=trustme.CA().cert_pem.bytes())
            async with GatewayClient(gateway.address, CALLER_TOKEN, tls=other) as client:
                with pytest.raises(GatewayUnreachableError, match="serves TLS"):
                    await client.claim("team-a")
            async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
                with pytest.raises(GatewayUnreachableError, match="serves plaintext"):
                    await client.claim("team-a")
        finally:
            await gateway.stop()

    assert result.stdout == "over-tls\n"
    assert gateway.methods() == ["Claim"]
