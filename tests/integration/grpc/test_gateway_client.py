"""GatewayClient and gateway-routed RuntimeClients against a gateway on 127.0.0.1.

Mostly the real gateway in-process (tests/support/client_gateway.py: its claim path and
the Kubernetes API server are stand-ins) in front of a real runtime agent. The few statuses
it cannot be made to answer on cue (DEADLINE_EXCEEDED, INTERNAL, one UNAVAILABLE to count
retries) come from a scripted GatewayService (tests/support/scripted_gateway_service.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from sandfleet.api import EgressMode, LifecycleSpec
from sandfleet.clients.gateway.client import GatewayClient
from sandfleet.clients.grpc_channel import Tls
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayStartError,
    GatewayUnreachableError,
    QuotaExceededError,
    SandboxStartError,
)
from sandfleet.gateway.claim_types import ClaimError, ClaimFailure
from tests.support.client_gateway import CALLER, CALLER_TOKEN, ClientGateway, client_gateway
from tests.support.runtime_server import running_runtime
from tests.support.scripted_gateway_service import Failure, ScriptedGatewayService

pytestmark = pytest.mark.integration

QUOTA_NAMESPACE = "team-q"
"""Where CALLER may create sessions, but at most one at a time (the gateway's quota)."""


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ClientGateway]:
    async with running_runtime(tmp_path, default_timeout_s=20.0) as (runtime, token):
        runtimes = [(f"127.0.0.1:{runtime.port}", token)]
        async with client_gateway(runtimes, str(tmp_path), quotas={QUOTA_NAMESPACE: 1}) as gw:
            gw.api.allow(CALLER, "create", QUOTA_NAMESPACE)
            yield gw


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedGatewayService]:
    service = ScriptedGatewayService()
    await service.start()
    yield service
    await service.stop()


async def test_claim_connect_release_carry_the_token_and_the_request(
    gateway: ClientGateway,
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

    assert [s.session for s in claimed] == ["team-a/rl-0", "team-a/rl-1"]
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
    # The gateway understood it all: the claim path got the caller and the whole request.
    (spec,) = gateway.claimer.specs
    assert (spec.caller, spec.egress, spec.timeout_s) == (CALLER, EgressMode.INTERNET, 45)
    assert [path for path, _, _ in spec.files] == ["input/a.txt", "/data/b.bin"]
    assert gateway.claimer.released == [("team-a", ["rl-0", "rl-1", "gone"])]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A claim the real gateway refuses: how to provoke it and what the client makes of it."""

    code: grpc.StatusCode
    error_class: type[GatewayError]
    message: str
    namespace: str = "team-a"
    count: int = 1
    token: str = CALLER_TOKEN
    prepare: Callable[[ClientGateway], Any] = lambda gateway: None


def _claims_fail(error: BaseException) -> Callable[[ClientGateway], Any]:
    def prepare(gateway: ClientGateway) -> None:
        gateway.claimer.fail_with = error

    return prepare


REFUSALS = {
    "unauthenticated": Refusal(
        grpc.StatusCode.UNAUTHENTICATED, GatewayAuthError,
        "the token was not accepted by the Kubernetes API server", token="someone-else",
    ),
    "permission_denied": Refusal(
        grpc.StatusCode.PERMISSION_DENIED, GatewayAuthError,
        f"user {CALLER} may not create sandboxsessions in namespace team-b", namespace="team-b",
    ),
    "quota": Refusal(
        grpc.StatusCode.RESOURCE_EXHAUSTED, QuotaExceededError,
        f"namespace {QUOTA_NAMESPACE} has 0 of its 1 sessions and asks for 2 more",
        namespace=QUOTA_NAMESPACE, count=2,
    ),
    "unavailable": Refusal(
        grpc.StatusCode.UNAVAILABLE, GatewayStartError, "no sandbox of pool py312 in 30s",
        prepare=_claims_fail(
            ClaimError(ClaimFailure.UNAVAILABLE, "no sandbox of pool py312 in 30s")
        ),
    ),
    "not_found": Refusal(
        grpc.StatusCode.NOT_FOUND, GatewayError, "no pool py312 in team-a",
        prepare=_claims_fail(ClaimError(ClaimFailure.NOT_FOUND, "no pool py312 in team-a")),
    ),
    "internal": Refusal(  # a bug in the claim path: the gateway logs it, the caller learns little
        grpc.StatusCode.INTERNAL, GatewayError, "gateway error, see its log",
        prepare=_claims_fail(RuntimeError("a bug")),
    ),
    "invalid_argument": Refusal(
        grpc.StatusCode.INVALID_ARGUMENT, GatewayError, "'Team_A' is not a namespace name",
        namespace="Team_A",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
async def test_each_status_of_the_gateway_becomes_its_error_with_the_gateways_message(
    gateway: ClientGateway, case: Refusal
) -> None:
    case.prepare(gateway)
    async with GatewayClient(gateway.address, case.token) as client:
        with pytest.raises(case.error_class) as raised:
            await client.claim(case.namespace, pool="py312", count=case.count)

    assert type(raised.value) is case.error_class
    assert raised.value.code == case.code.name
    assert case.message in str(raised.value)
    assert gateway.address in str(raised.value)
    # A Claim the gateway answered is never repeated: it may have started sandboxes.
    assert gateway.methods() == ["Claim"]


async def test_a_deadline_exceeded_is_a_start_error(scripted: ScriptedGatewayService) -> None:
    # The real gateway answers UNAVAILABLE before the client's deadline; a proxy in between
    # (an Ingress) may still answer DEADLINE_EXCEEDED.
    scripted.failures["Claim"] = Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "upstream timed out")
    async with GatewayClient(scripted.address, CALLER_TOKEN) as client:
        with pytest.raises(GatewayStartError) as raised:
            await client.claim("team-a", pool="py312")

    assert type(raised.value) is GatewayStartError
    assert raised.value.code == "DEADLINE_EXCEEDED"
    assert "upstream timed out" in str(raised.value)
    assert scripted.address in str(raised.value)
    assert scripted.methods() == ["Claim"]


async def test_a_start_failure_is_a_sandbox_start_error_too(gateway: ClientGateway) -> None:
    gateway.claimer.fail_with = ClaimError(ClaimFailure.UNAVAILABLE, "no sandbox in 30s")
    async with GatewayClient(gateway.address, CALLER_TOKEN) as client:
        with pytest.raises(SandboxStartError, match="no sandbox in 30s"):
            await client.claim("team-a")


async def test_a_wrong_token_is_refused_as_an_auth_error(gateway: ClientGateway) -> None:
    async with GatewayClient(gateway.address, "someone-else") as client:
        with pytest.raises(GatewayAuthError, match="the token was not accepted"):
            await client.claim("team-a")
    assert gateway.calls[0][2]["authorization"] == "Bearer someone-else"
    assert [review["spec"]["token"] for review in gateway.api.reviews] == ["someone-else"]
    assert not gateway.claimer.specs


async def test_release_and_connect_are_retried_after_unavailable_claim_is_not(
    scripted: ScriptedGatewayService,
) -> None:
    async with GatewayClient(scripted.address, CALLER_TOKEN) as client:
        scripted.failures["Claim"] = Failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        with pytest.raises(GatewayStartError, match="restarting"):
            await client.claim("team-a")
        (claimed,) = await client.claim("team-a")
        scripted.failures["Connect"] = Failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        scripted.failures["Release"] = Failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        assert (await client.connect("team-a", claimed.name)).name == claimed.name
        assert await client.release("team-a", [claimed.name]) == 1

    assert scripted.methods() == ["Claim", "Claim", "Connect", "Connect", "Release", "Release"]


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
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    certificate.cert_chain_pems[0].write_to_path(str(cert_file))
    certificate.private_key_pem.write_to_path(str(key_file))
    tls_files = {"tls_cert_file": cert_file, "tls_key_file": key_file}
    trusted = Tls(root_certificates=ca.cert_pem.bytes())
    async with (
        running_runtime(tmp_path) as (runtime, token),
        client_gateway([(f"127.0.0.1:{runtime.port}", token)], str(tmp_path), **tls_files) as gw,
    ):
        async with GatewayClient(gw.address, CALLER_TOKEN, tls=trusted) as client:
            (claimed,) = await client.claim("team-a")
        # The data plane rides the same TLS channel settings.
        runtime_client = RuntimeClient(
            gw.address,
            claimed.token,
            session=claimed.session,
            tls=trusted,
            caller_token=lambda: CALLER_TOKEN,
        )
        try:
            result = await runtime_client.run_command("echo over-tls")
        finally:
            await runtime_client.close()
        # Another CA's bundle does not verify the gateway; nor does plaintext reach it.
        other = Tls(root_certificates=trustme.CA().cert_pem.bytes())
        async with GatewayClient(gw.address, CALLER_TOKEN, tls=other) as client:
            with pytest.raises(GatewayUnreachableError, match="serves TLS"):
                await client.claim("team-a")
        async with GatewayClient(gw.address, CALLER_TOKEN) as client:
            with pytest.raises(GatewayUnreachableError, match="serves plaintext"):
                await client.claim("team-a")

    assert result.stdout == "over-tls\n"
    assert gw.methods() == ["Claim"]
    assert [method.rsplit("/", 1)[1] for method, _ in gw.proxied] == ["RunCommand"]
