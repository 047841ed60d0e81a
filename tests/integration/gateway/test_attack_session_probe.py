"""Issue #26 item 5, against the real in-process gateway and real runtimes on 127.0.0.1 (the
API server is the stand-in, which counts every request): proxied calls with made-up session
names. Before the fix each cost one API-server GET and answered NOT_FOUND, while a wrong
token answered UNAUTHENTICATED: a load lever on the API server and an existence oracle."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from sandfleet.api import GATEWAY_SESSION_METADATA
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb
from sandfleet_proto.runtime.v1 import system_service_pb2_grpc as system_grpc
from tests.support.gateway_api import StandInApiServer, running_api
from tests.support.gateway_server import StandInClaimer, running_gateway
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

VICTIM, ATTACKER = "system:serviceaccount:team-a:trainer", "system:serviceaccount:team-b:bot"
PROBES = 300


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[StandInApiServer, grpc.aio.Channel]]:
    async with contextlib.AsyncExitStack() as stack:
        runtime, token = await stack.enter_async_context(running_runtime(tmp_path))
        api, kube = await stack.enter_async_context(running_api())
        api.accept("victim-token", VICTIM)
        api.accept("attacker-token", ATTACKER)
        api.allow(VICTIM, "create", "team-a")
        api.allow(ATTACKER, "create", "team-b")
        claimer = StandInClaimer([("pod-0", f"127.0.0.1:{runtime.port}", token)])
        server = await stack.enter_async_context(running_gateway(kube, claimer))
        channel = grpc.aio.insecure_channel(server.address)
        stack.push_async_callback(channel.close)
        yield api, channel


def _metadata(session: str, runtime_token: str, caller_token: str) -> tuple[tuple[str, str], ...]:
    return (
        ("authorization", f"Bearer {runtime_token}"),
        (GATEWAY_SESSION_METADATA, session),
        ("x-sandfleet-authorization", f"Bearer {caller_token}"),
    )


async def test_made_up_names_cost_no_api_request_and_answer_like_a_wrong_token(
    gateway: tuple[StandInApiServer, grpc.aio.Channel],
) -> None:
    api, channel = gateway
    stub = gateway_grpc.GatewayServiceStub(channel)
    system = system_grpc.SystemServiceStub(channel)
    victim = ("authorization", "Bearer victim-token")
    claimed = (
        await stub.Claim(gateway_pb.ClaimRequest(namespace="team-a"), metadata=(victim,))
    ).sandboxes[0]
    real = f"team-a/{claimed.name}"
    api.requests.clear()

    async def probe(session: str, runtime_token: str, caller: str) -> tuple[grpc.StatusCode, str]:
        try:
            await system.GetStats(
                system_pb.GetStatsRequest(),
                metadata=_metadata(session, runtime_token, caller),
                timeout=30,
            )
        except grpc.aio.AioRpcError as error:
            return error.code(), (error.details() or "").replace(session, "SESSION")
        return grpc.StatusCode.OK, ""

    async def connect_latency() -> list[float]:
        """What a legitimate tenant's Connect costs meanwhile."""
        took = []
        for _ in range(20):
            started = time.monotonic()
            await stub.Connect(
                gateway_pb.ConnectRequest(namespace="team-a", name=claimed.name),
                metadata=(victim,),
                timeout=10,
            )
            took.append(time.monotonic() - started)
        return took

    names = [f"team-a/sbx-{secrets.token_hex(4)}" for _ in range(PROBES)]
    probes = [probe(name, "guess", "victim-token") for name in names[: PROBES // 2]]
    probes += [probe(name, "guess", "attacker-token") for name in names[PROBES // 2 :]]
    probes += [
        probe(real, "guess", "victim-token"),  # the real name, a wrong runtime token
        probe(real, claimed.token, "attacker-token"),  # the real token, another tenant
    ]
    answers, latencies = await asyncio.gather(asyncio.gather(*probes), connect_latency())

    assert set(answers) == {(grpc.StatusCode.PERMISSION_DENIED, answers[0][1])}, set(answers)
    assert "not available to this caller" in answers[0][1]
    gets = [key for key in api.requests if key[0] == "GET"]
    assert gets == [], f"{sum(api.requests[k] for k in gets)} API GETs for made-up names"
    assert statistics.median(latencies) < 0.05, latencies
    # The rightful caller still gets through.
    stats = await system.GetStats(
        system_pb.GetStatsRequest(),
        metadata=_metadata(real, claimed.token, "victim-token"),
        timeout=10,
    )
    assert stats.uptime_seconds > 0


async def test_a_proxied_call_without_a_valid_caller_token_is_refused_before_any_lookup(
    gateway: tuple[StandInApiServer, grpc.aio.Channel],
) -> None:
    """A runtime token alone no longer opens a sandbox: the caller's Kubernetes token is
    checked on every proxied call (#26 item 8), and its answer does not depend on the name."""
    _, channel = gateway
    stub = gateway_grpc.GatewayServiceStub(channel)
    claimed = (
        await stub.Claim(
            gateway_pb.ClaimRequest(namespace="team-a"),
            metadata=(("authorization", "Bearer victim-token"),),
        )
    ).sandboxes[0]
    system = system_grpc.SystemServiceStub(channel)
    for session in (f"team-a/{claimed.name}", "team-a/made-up"):
        for caller in (None, "revoked-token"):
            metadata = (
                ("authorization", f"Bearer {claimed.token}"),
                (GATEWAY_SESSION_METADATA, session),
            )
            if caller:
                metadata += (("x-sandfleet-authorization", f"Bearer {caller}"),)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert session not in (refused.value.details() or "")
