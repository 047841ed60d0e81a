"""GatewayServer as a process part: TLS when both files are set, a graceful stop that lets
calls in flight finish, and the claimer's start/stop. API server and claim path are
stand-ins (tests/support/gateway_api.py, tests/support/gateway_server.py)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import grpc
import grpc.aio
import pytest

from sandfleet.api import GATEWAY_SESSION_METADATA
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from tests.support.gateway_api import running_api
from tests.support.gateway_server import StandInClaimer, running_gateway
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

USER = "system:serviceaccount:rl:trainer"
AUTH = (("authorization", "Bearer trainer-token"),)


def self_signed(directory: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed to make a test certificate)")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_is_served_when_both_files_are_set(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    async with running_api() as (api, kube):
        api.accept("trainer-token", USER)
        api.allow(USER, "create", "team-a")
        claimer = StandInClaimer([("pod-0", "127.0.0.1:1", "t0")])
        async with running_gateway(kube, claimer, tls_cert_file=cert, tls_key_file=key) as gw:
            credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
            async with grpc.aio.secure_channel(gw.address, credentials) as channel:
                response = await gateway_grpc.GatewayServiceStub(channel).Claim(
                    gateway_pb.ClaimRequest(namespace="team-a"), metadata=AUTH, timeout=10
                )
            assert [s.name for s in response.sandboxes] == ["sandbox-0"]
            async with grpc.aio.insecure_channel(gw.address) as plain:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await gateway_grpc.GatewayServiceStub(plain).Claim(
                        gateway_pb.ClaimRequest(namespace="team-a"), metadata=AUTH, timeout=3
                    )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_graceful_stop_lets_calls_in_flight_finish(tmp_path: Path) -> None:
    async with (
        running_runtime(tmp_path, default_timeout_s=20.0) as (runtime, token),
        running_api() as (api, kube),
    ):
        api.accept("trainer-token", USER)
        api.allow(USER, "create", "team-a")
        claimer = StandInClaimer([("pod-0", f"127.0.0.1:{runtime.port}", token)])
        async with running_gateway(kube, claimer) as gw:
            assert claimer.started
            channel = grpc.aio.insecure_channel(gw.address)
            try:
                (sandbox,) = (
                    await gateway_grpc.GatewayServiceStub(channel).Claim(
                        gateway_pb.ClaimRequest(namespace="team-a"), metadata=AUTH, timeout=10
                    )
                ).sandboxes
                metadata = (
                    ("authorization", f"Bearer {sandbox.token}"),
                    (GATEWAY_SESSION_METADATA, f"team-a/{sandbox.name}"),
                    ("x-sandfleet-authorization", "Bearer trainer-token"),
                )
                bash = bash_grpc.BashServiceStub(channel)
                running = asyncio.ensure_future(
                    bash.RunCommand(
                        bash_pb.RunCommandRequest(command="sleep 1; echo finished"),
                        metadata=metadata,
                        timeout=20,
                    )
                )
                await asyncio.sleep(0.3)  # the call is in flight
                await gw.stop(grace_s=10)
                assert (await running).stdout == "finished\n"
                assert claimer.stopped
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await bash.RunCommand(
                        bash_pb.RunCommandRequest(command="true"), metadata=metadata, timeout=3
                    )
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            finally:
                await channel.close()
