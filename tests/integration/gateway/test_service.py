"""GatewayService over gRPC on the in-process gateway: auth, validation, quotas, claim
failures, Connect/Release, metrics and health. The API server and the claim path are
stand-ins (tests/support/gateway_api.py, tests/support/gateway_server.py); the cluster tier
runs the same calls against the real ones."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sandfleet.api import EgressMode
from sandfleet.gateway.claim_types import ClaimError, ClaimFailure
from sandfleet.gateway.server import GatewayServer
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc
from tests.support.gateway_api import StandInApiServer, running_api, session_object
from tests.support.gateway_server import StandInClaimer, running_gateway

pytestmark = pytest.mark.integration

SCRAPER = "system:serviceaccount:monitoring:prometheus"
TRAINER = "system:serviceaccount:rl:trainer"
AUTH = (("authorization", "Bearer trainer-token"),)


class Harness:
    def __init__(self, server: GatewayServer, api: StandInApiServer, claimer: StandInClaimer):
        self.server = server
        self.api = api
        self.claimer = claimer
        self.channel = grpc.aio.insecure_channel(server.address)
        self.stub = gateway_grpc.GatewayServiceStub(self.channel)

    async def claim(self, metadata: Any = AUTH, **fields: Any) -> gateway_pb.ClaimResponse:
        request = gateway_pb.ClaimRequest(**({"namespace": "team-a"} | fields))
        return await self.stub.Claim(request, metadata=metadata, timeout=10)

    async def refusal(self, metadata: Any = AUTH, **fields: Any) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await self.claim(metadata, **fields)
        return refused.value


@contextlib.asynccontextmanager
async def harness(sandboxes: int = 4, **settings: Any) -> AsyncIterator[Harness]:
    async with running_api() as (api, kube):
        api.accept("trainer-token", TRAINER)
        api.expired.add("old-token")
        api.allow(TRAINER, "create", "team-a")
        api.allow(TRAINER, "delete", "team-a")
        api.allow(TRAINER, "create", "team-b")
        api.accept("scraper-token", SCRAPER)
        api.allow_url(SCRAPER, "get", "/metrics")
        claimer = StandInClaimer(
            [(f"pod-{i}", f"127.0.0.1:{60000 + i}", f"token-{i}") for i in range(sandboxes)],
            workdir="/workspace",
        )
        async with running_gateway(kube, claimer, **settings) as server:
            h = Harness(server, api, claimer)
            try:
                yield h
            finally:
                await h.channel.close()


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    async with harness() as started:
        yield started


async def test_a_claim_hands_out_the_sandboxes_and_passes_a_checked_spec(h: Harness) -> None:
    response = await h.claim(pool="warm", count=2, env={"A_B": "1"})
    assert [(s.namespace, s.name, s.token, s.pod, s.warm) for s in response.sandboxes] == [
        ("team-a", "sandbox-0", "token-0", "pod-0", True),
        ("team-a", "sandbox-1", "token-1", "pod-1", True),
    ]
    assert response.sandboxes[0].working_dir == "/workspace"
    (spec,) = h.claimer.specs
    assert (spec.pool, spec.template, spec.count, spec.caller) == ("warm", None, 2, TRAINER)
    assert (spec.generate_name, spec.egress, spec.env) == (
        "sandbox-",
        EgressMode.NONE,
        {"A_B": "1"},
    )
    assert spec.timeout_s == h.server.settings.cold_start_timeout_seconds
    route = h.server.routes.get("team-a", "sandbox-1")
    assert route is not None and route.address == "127.0.0.1:60001"


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ((), "no bearer token"),
        ((("authorization", "Bearer old-token"),), "not accepted by the Kubernetes API server"),
        ((("authorization", "Bearer nobody"),), "(expired or wrong)"),
    ],
)
async def test_no_or_a_refused_token_is_unauthenticated(
    h: Harness, metadata: Any, message: str
) -> None:
    refused = await h.refusal(metadata, pool="warm")
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
    assert message in (refused.details() or "")
    assert h.claimer.specs == []


async def test_another_namespace_is_permission_denied_by_name(h: Harness) -> None:
    refused = await h.refusal(namespace="team-c", pool="warm")
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.details() == f"user {TRAINER} may not create sandboxsessions in namespace team-c"


async def test_an_api_server_that_cannot_review_is_unavailable_not_a_traceback(
    h: Harness,
) -> None:
    h.api.users.clear()  # force a review of a token not cached yet
    h.api.review_status = 503
    refused = await h.refusal((("authorization", "Bearer fresh-token"),), pool="warm")
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert "try again" in (refused.details() or "")
    assert "Traceback" not in (refused.details() or "")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"count": 101}, "count: 1 to 100 sandboxes per claim, not 101"),
        ({"pool": "p", "template": "t"}, "pool, template: set one of them, not both"),
        ({"pool": "Not_A_Name"}, "pool: 'Not_A_Name' is not a Kubernetes object name"),
        ({"egress": "Everything"}, "egress: 'Everything' is not one of None, Internet, All"),
        ({"env": {"1BAD": "x"}}, "env['1BAD']: not a variable name"),
        ({"files": [gateway_pb.InputFile(path="")]}, "files[0].path: required"),
        ({"generate_name": "UPPER-"}, "generate_name: 'UPPER-' is not a name prefix"),
        ({"timeout_seconds": -1}, "timeout_seconds: must be 0 or a positive number"),
    ],
)
async def test_a_bad_request_is_invalid_and_names_the_field(
    h: Harness, fields: dict[str, Any], field: str
) -> None:
    refused = await h.refusal(**fields)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.details() or "").startswith(field)
    assert h.claimer.specs == []


async def test_the_quota_refuses_what_does_not_fit_and_names_the_limit() -> None:
    async with harness(quota_default=2, quotas={"team-b": 1}) as h:
        await h.claim(pool="warm")
        h.api.put_session(session_object("team-a", "made-with-kubectl", phase="Running"))
        refused = await h.refusal(pool="warm")
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.details() == (
            "namespace team-a has 2 of its 2 sessions and asks for another (the gateway's "
            "default quota (quota_default)); release some or raise the limit"
        )
        await h.claim(namespace="team-b", pool="warm")
        refused = await h.refusal(namespace="team-b", pool="warm", count=2)
        assert "namespace team-b has 1 of its 1 sessions and asks for 2 more" in (
            refused.details() or ""
        )
        assert "quota for team-b (quotas)" in (refused.details() or "")
        # Finished sessions do not count.
        h.api.put_session(
            session_object("team-a", "made-with-kubectl", phase="Succeeded"), "MODIFIED"
        )
        for _ in range(50):
            if h.server.routes.active("team-a") == 1:
                break
            await _tick()
        await h.claim(pool="warm")
        metrics = await _get(h, "/metrics")
        assert 'sandfleet_gateway_quota_rejections_total{namespace="team-a"} 1.0' in metrics
        assert 'sandfleet_gateway_quota_rejections_total{namespace="team-b"} 1.0' in metrics


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (ClaimFailure.INVALID, grpc.StatusCode.INVALID_ARGUMENT),
        (ClaimFailure.NOT_FOUND, grpc.StatusCode.NOT_FOUND),
        (ClaimFailure.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
    ],
)
async def test_claim_failures_map_to_their_codes_with_their_message(
    h: Harness, failure: ClaimFailure, code: grpc.StatusCode
) -> None:
    h.claimer.fail_with = ClaimError(failure, f"the claim path says {failure.value}")
    refused = await h.refusal(pool="warm")
    assert (refused.code(), refused.details()) == (code, f"the claim path says {failure.value}")
    assert h.server.quotas.in_use("team-a") == 0  # the reservation ended with the call


async def test_an_unexpected_error_is_internal_without_its_details(h: Harness) -> None:
    h.claimer.fail_with = RuntimeError("secret internals at 0xdeadbeef")
    refused = await h.refusal(pool="warm")
    assert (refused.code(), refused.details()) == (
        grpc.StatusCode.INTERNAL,
        "gateway error, see its log",
    )


async def test_connect_and_release(h: Harness) -> None:
    (sandbox,) = (await h.claim(pool="warm")).sandboxes
    connected = await h.stub.Connect(
        gateway_pb.ConnectRequest(namespace="team-a", name=sandbox.name), metadata=AUTH, timeout=5
    )
    assert connected.sandbox == sandbox
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await h.stub.Connect(
            gateway_pb.ConnectRequest(namespace="team-a", name="gone"), metadata=AUTH, timeout=5
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    released = await h.stub.Release(
        gateway_pb.ReleaseRequest(namespace="team-a", names=[sandbox.name, "gone"]),
        metadata=AUTH,
        timeout=5,
    )
    assert released.released == 1
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await h.stub.Release(
            gateway_pb.ReleaseRequest(namespace="team-b", names=["x"]), metadata=AUTH, timeout=5
        )
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "may not delete sandboxsessions in namespace team-b" in (denied.value.details() or "")


async def test_metrics_health_and_readiness(h: Harness) -> None:
    await h.claim(pool="warm")
    await h.refusal(pool="p", template="t")
    metrics = await _get(h, "/metrics")
    assert 'sandfleet_gateway_claims_total{result="ok"} 1.0' in metrics
    assert 'sandfleet_gateway_claims_total{result="invalid"} 1.0' in metrics
    assert 'sandfleet_gateway_claim_seconds_count{pool="warm",start="warm"} 1.0' in metrics
    assert 'sandfleet_gateway_open_sessions{namespace="team-a"} 1.0' in metrics
    assert await _get(h, "/readyz") == "ready\n"
    assert await _get(h, "/healthz") == "ok\n"
    health = health_pb2_grpc.HealthStub(h.channel)
    answer = await health.Check(
        health_pb2.HealthCheckRequest(service="sandfleet.gateway.v1.GatewayService"), timeout=5
    )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def _get(h: Harness, path: str, token: str = "scraper-token") -> str:
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        session.get(f"http://127.0.0.1:{h.server.http_port}{path}") as response,
    ):
        return await response.text()


async def test_metrics_want_a_token_allowed_to_get_metrics(h: Harness) -> None:
    """/metrics names tenants' namespaces (#26 item 2): a tenant's token is refused."""
    assert "may not get /metrics" in await _get(h, "/metrics", token="trainer-token")
    assert "no bearer token" in await _get(h, "/metrics", token="")
    assert "sandfleet_gateway" in await _get(h, "/metrics")
    assert (await _get(h, "/healthz", token="")).strip() == "ok"


async def _tick() -> None:
    await asyncio.sleep(0.05)
