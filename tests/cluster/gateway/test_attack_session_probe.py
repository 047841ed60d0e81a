"""Issue #26 item 5 as the attack, on the real cluster: another tenant (a ServiceAccount with
only the tenant Role, in its own namespace) fires proxied calls at made-up session names in
the victim's namespace, and at the victim's real session with a guessed or a stolen runtime
token. Before the fix each made-up name cost the API server one GET (300 calls, 300 GETs; a
load lever that slowed everyone's Connect) and answered NOT_FOUND where a real name answered
UNAUTHENTICATED — an existence oracle — and a stolen runtime token simply worked.

Also kept as tests, the cross-tenant attacks that held: Connect to and Release of another
tenant's session are refused and leave it alone; and (issue #23) neither Suspend, resume nor
a read of a Suspended session's files crosses tenants.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from sandfleet import Sandbox
from sandfleet.api import CALLER_AUTHORIZATION, GATEWAY_SESSION_METADATA
from sandfleet.clients.gateway.client import GatewayClient
from sandfleet.errors import GatewayAuthError
from sandfleet.gateway.server import GatewayServer
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb
from sandfleet_proto.runtime.v1 import system_service_pb2_grpc as system_grpc
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.measurements import record
from tests.cluster.harness.operator_harness import POOLS, SESSIONS, OperatorProcess

pytestmark = pytest.mark.cluster

PROBES = 300


@dataclasses.dataclass
class Tenants:
    gateway: GatewayServer
    sandbox: Sandbox
    """The victim's claimed sandbox."""
    victim: str
    attacker: str
    """Tokens: the victim's (tenant Role in `namespace`), the attacker's (in another one)."""


@pytest.fixture
async def tenants(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> AsyncIterator[Tenants]:
    other = f"{namespace}-other"
    await kube.checked(
        "POST", "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}},
    )  # fmt: skip
    await create_pool(kube, namespace, "warm", 1)
    gateway = await start_gateway()
    victim = await tenant_token(kube, namespace)
    attacker = await tenant_token(kube, other)
    await until_claimable(gateway, namespace, "warm", 1)
    sandbox = await Sandbox.on_cluster(
        namespace, pool="warm", gateway=gateway.address, token=victim
    )
    try:
        yield Tenants(gateway, sandbox, victim, attacker)
    finally:
        await sandbox.close()
        await kube.request("DELETE", f"{POOLS.format(ns=namespace)}/warm")
        await kube.request("DELETE", f"/api/v1/namespaces/{other}")


@contextlib.contextmanager
def counting_requests(gateway: GatewayServer) -> Iterator[collections.Counter[tuple[str, str]]]:
    """Every request the gateway's Kubernetes client makes while the block runs."""
    requests: collections.Counter[tuple[str, str]] = collections.Counter()
    request = gateway.kube.request

    async def counted(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        requests[(method, path)] += 1
        return await request(method, path, *args, **kwargs)

    gateway.kube.request = counted  # type: ignore[method-assign]
    try:
        yield requests
    finally:
        gateway.kube.request = request  # type: ignore[method-assign]


async def probe(
    system: system_grpc.SystemServiceStub, session: str, runtime: str, caller: str
) -> tuple[grpc.StatusCode, str]:
    """A proxied call's answer, the session's name masked (it is what the caller sent)."""
    metadata = (
        ("authorization", f"Bearer {runtime}"),
        (GATEWAY_SESSION_METADATA, session),
        (CALLER_AUTHORIZATION, f"Bearer {caller}"),
    )
    try:
        await system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=30)
    except grpc.aio.AioRpcError as error:
        return error.code(), (error.details() or "").replace(session, "SESSION")
    return grpc.StatusCode.OK, "answered"


async def connect_latencies(client: GatewayClient, namespace: str, name: str) -> list[float]:
    took = []
    for _ in range(15):
        started = time.monotonic()
        await client.connect(namespace, name)
        took.append(time.monotonic() - started)
    return took


async def test_made_up_names_cost_the_api_server_nothing_and_tell_nothing(
    namespace: str, tenants: Tenants
) -> None:
    sandbox, gateway = tenants.sandbox, tenants.gateway
    runtime_token = sandbox.session.token  # type: ignore[union-attr]
    real = f"{namespace}/{sandbox.name}"
    async with (
        GatewayClient(gateway.address, tenants.victim) as victim_client,
        grpc.aio.insecure_channel(gateway.address) as channel,
    ):
        system = system_grpc.SystemServiceStub(channel)
        with counting_requests(gateway) as baseline:  # what 15 legitimate Connects cost
            quiet = await connect_latencies(victim_client, namespace, sandbox.name)
        names = [f"{namespace}/sbx-{secrets.token_hex(4)}" for _ in range(PROBES)]
        probes = [probe(system, n, "guess", tenants.attacker) for n in names[: PROBES // 2]]
        probes += [probe(system, n, "guess", tenants.victim) for n in names[PROBES // 2 :]]
        probes += [
            probe(system, real, "guess", tenants.victim),  # the real name, a guessed token
            probe(system, real, "guess", tenants.attacker),  # the real name, another tenant
            probe(system, real, runtime_token, tenants.attacker),  # a stolen runtime token
        ]
        with counting_requests(gateway) as requests:
            answers, loaded = await asyncio.gather(
                asyncio.gather(*probes), connect_latencies(victim_client, namespace, sandbox.name)
            )
    gets = {key: count for key, count in requests.items() if key[0] == "GET"}
    connect_gets = {key: count for key, count in baseline.items() if key[0] == "GET"}
    extra = sum(gets.values()) - sum(connect_gets.values())
    record(
        "gateway_session_probe",
        {"probes": len(probes), "extra_api_gets": extra,
         "api_requests_besides_connects": sum(requests.values()) - sum(baseline.values()),
         "connect_p50_quiet_ms": round(statistics.median(quiet) * 1000, 1),
         "connect_p50_under_probe_ms": round(statistics.median(loaded) * 1000, 1)},
    )  # fmt: skip
    assert len(set(answers)) == 1, collections.Counter(answers)
    code, details = answers[0]
    assert code == grpc.StatusCode.PERMISSION_DENIED and "not available" in details
    # The same 15 Connects, the same GETs of the real session: not one for a probe.
    assert gets == connect_gets, (gets, connect_gets)
    # Besides: a few reviews (the attacker's token and RBAC once, tokens again every
    # token_review_ttl_seconds), never one per probe.
    reviews = {key: n for key, n in requests.items() if key[0] == "POST"}
    assert {path.rsplit("/", 1)[-1] for _, path in reviews} <= {
        "tokenreviews",
        "subjectaccessreviews",
    }, reviews
    assert sum(reviews.values()) <= 6, reviews
    assert statistics.median(loaded) < 3 * statistics.median(quiet) + 0.05, (quiet, loaded)
    # The rightful tenant still gets through.
    assert (await sandbox.bash("echo mine")).stdout == "mine\n"


async def test_another_tenant_can_neither_connect_to_nor_release_a_session(
    kube: KubeApi, namespace: str, tenants: Tenants
) -> None:
    """Attacks that held before the fix, kept: the control calls across tenants."""
    name = tenants.sandbox.name
    async with GatewayClient(tenants.gateway.address, tenants.attacker) as attacker:
        with pytest.raises(GatewayAuthError, match="may not create sandboxsessions"):
            await attacker.connect(namespace, name)
        with pytest.raises(GatewayAuthError, match="may not delete sandboxsessions"):
            await attacker.release(namespace, [name])
    session = await kube.request("GET", f"{SESSIONS.format(ns=namespace)}/{name}")
    assert session.status == 200
    assert (await tenants.sandbox.bash("echo still mine")).stdout == "still mine\n"


async def test_another_tenant_can_neither_suspend_resume_nor_read_a_suspended_session(
    kube: KubeApi, namespace: str, tenants: Tenants, operator: OperatorProcess
) -> None:
    """Issue #23: a snapshot is tenant data. Another namespace's token gets a permission
    error for the session's Suspend (which would answer its snapshot record), its resume
    (Sandbox.resume, Connect) and a proxied read of its files (which would resume it, even
    with the stolen runtime token); the session stays Suspended, never resumed."""
    sandbox, gateway = tenants.sandbox, tenants.gateway
    name, runtime_token = sandbox.name, sandbox.session.token  # type: ignore[union-attr]
    await sandbox.bash("echo secret > /testbed/secret.txt")
    record = await sandbox.suspend()
    where = {"gateway": gateway.address, "token": tenants.attacker}
    async with GatewayClient(gateway.address, tenants.attacker) as attacker:
        with pytest.raises(GatewayAuthError, match="may not patch sandboxsessions"):
            await attacker.suspend(namespace, name)
    with pytest.raises(GatewayAuthError, match="may not create sandboxsessions"):
        await Sandbox.resume(record, **where)
    with pytest.raises(GatewayAuthError, match="may not create sandboxsessions"):
        await Sandbox.connect_session(name, namespace, **where)
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        system = system_grpc.SystemServiceStub(channel)
        answer = await probe(system, f"{namespace}/{name}", runtime_token, tenants.attacker)
    assert answer[0] == grpc.StatusCode.PERMISSION_DENIED, answer
    body = await kube.checked("GET", f"{SESSIONS.format(ns=namespace)}/{name}")
    assert body["status"]["phase"] == "Suspended" and body["spec"]["suspend"] is True
    resumed = [line for line in operator.log_lines() if '"session_resumed"' in line]
    assert not [line for line in resumed if f"{namespace}/{name}" in line], resumed
    # The owner asks again: the record comes back at once, unchanged.
    async with GatewayClient(gateway.address, tenants.victim) as owner:
        again = await owner.suspend(namespace, name)
        assert (again.sha256, again.size_bytes) == (record.sha256, record.size_bytes)
        await owner.release(namespace, [name])
