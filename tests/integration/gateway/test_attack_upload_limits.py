"""Issue 26, finding 9, through the front door: a tenant's oversized upload goes through the
real gateway proxy to a real runtime on 127.0.0.1 (its cap set low, as the operator sets it
on a pod) and is refused there. The proxy streams rather than buffers, so the refusal comes
back with the runtime's RESOURCE_EXHAUSTED and its message, and no file is left behind.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc
from sandfleet_runtime.settings import MAX_UPLOAD_BYTES_ENV
from tests.support.gateway_api import running_api
from tests.support.gateway_server import StandInClaimer, running_gateway
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

USER_TOKEN = "tenant-token"
LIMIT = 4 * 1024 * 1024


@pytest.fixture
async def claimed(tmp_path: Path) -> AsyncIterator[tuple[RuntimeClient, Path]]:
    """A client of one claimed sandbox, through the gateway, and the sandbox's directory."""
    async with contextlib.AsyncExitStack() as stack:
        runtime, token = await stack.enter_async_context(
            running_runtime(tmp_path, max_upload_bytes=LIMIT)
        )
        api, kube = await stack.enter_async_context(running_api())
        api.accept(USER_TOKEN, "system:serviceaccount:team-a:agent")
        api.allow("system:serviceaccount:team-a:agent", "create", "team-a")
        claimer = StandInClaimer([("pod-0", f"127.0.0.1:{runtime.port}", token)])
        server = await stack.enter_async_context(running_gateway(kube, claimer))
        channel = grpc.aio.insecure_channel(server.address)
        stack.push_async_callback(channel.close, None)
        response = await gateway_grpc.GatewayServiceStub(channel).Claim(
            gateway_pb.ClaimRequest(namespace="team-a", pool="warm", count=1),
            metadata=(("authorization", f"Bearer {USER_TOKEN}"),),
            timeout=10,
        )
        (sandbox,) = response.sandboxes
        proxied = RuntimeClient(
            server.address,
            sandbox.token,
            session=f"{sandbox.namespace}/{sandbox.name}",
            caller_token=lambda: USER_TOKEN,  # the gateway checks the caller on every call
        )
        stack.push_async_callback(proxied.close)
        yield proxied, tmp_path


async def test_an_upload_over_the_cap_is_refused_through_the_gateway_and_leaves_nothing(
    claimed: tuple[RuntimeClient, Path],
) -> None:
    client, workdir = claimed
    before = sorted(p.name for p in workdir.iterdir())

    for _ in range(5):  # every attempt gets the runtime's own refusal, never a garbled one
        with pytest.raises(ToolError) as refused:
            await client.upload(b"\0" * (8 * LIMIT), str(workdir / "big.bin"))
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        assert f"exceeds the limit of {LIMIT} bytes (4 MiB)" in str(refused.value)
        assert MAX_UPLOAD_BYTES_ENV in str(refused.value)

    assert sorted(p.name for p in workdir.iterdir()) == before
    fits = await client.upload(b"\1" * LIMIT, str(workdir / "fits.bin"))
    assert fits.size == LIMIT
