"""The runtime proxy end to end: a client -> the in-process gateway -> real runtimes on
127.0.0.1. The claim path and the API server are stand-ins (tests/support/gateway_server.py,
tests/support/gateway_api.py); every byte of the data plane goes through the real proxy."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from sandfleet.api import GATEWAY_SESSION_METADATA
from sandfleet.gateway.server import GatewayServer
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from sandfleet_proto.runtime.v1 import editor_service_pb2 as editor_pb
from sandfleet_proto.runtime.v1 import editor_service_pb2_grpc as editor_grpc
from sandfleet_proto.runtime.v1 import file_service_pb2 as file_pb
from sandfleet_proto.runtime.v1 import file_service_pb2_grpc as file_grpc
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb
from sandfleet_proto.runtime.v1 import system_service_pb2_grpc as system_grpc
from sandfleet_runtime.server import RuntimeServer
from tests.support.gateway_api import StandInApiServer, running_api, session_object
from tests.support.gateway_server import StandInClaimer, running_gateway
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

USER_TOKEN = "trainer-token"
Metadata = tuple[tuple[str, str], ...]


class Gateway:
    def __init__(
        self,
        server: GatewayServer,
        api: StandInApiServer,
        runtimes: list[tuple[RuntimeServer, str, Path]],
    ) -> None:
        self.server = server
        self.api = api
        self.runtimes = runtimes
        self.channel = grpc.aio.insecure_channel(
            server.address,
            options=(
                ("grpc.max_receive_message_length", 16 * 1024 * 1024),
                ("grpc.max_send_message_length", 16 * 1024 * 1024),
            ),
        )
        self.gateway = gateway_grpc.GatewayServiceStub(self.channel)
        self.bash = bash_grpc.BashServiceStub(self.channel)
        self.editor = editor_grpc.EditorServiceStub(self.channel)
        self.files = file_grpc.FileServiceStub(self.channel)
        self.system = system_grpc.SystemServiceStub(self.channel)

    async def claim(self, count: int = 1) -> list[gateway_pb.ClaimedSandbox]:
        response = await self.gateway.Claim(
            gateway_pb.ClaimRequest(namespace="team-a", pool="warm", count=count),
            metadata=(("authorization", f"Bearer {USER_TOKEN}"),),
            timeout=10,
        )
        return list(response.sandboxes)


CALLER = ("x-sandfleet-authorization", f"Bearer {USER_TOKEN}")
"""The caller's Kubernetes token, which every proxied call carries too."""


def session_metadata(sandbox: gateway_pb.ClaimedSandbox, token: str | None = None) -> Metadata:
    return (
        ("authorization", f"Bearer {token or sandbox.token}"),
        (GATEWAY_SESSION_METADATA, f"{sandbox.namespace}/{sandbox.name}"),
        CALLER,
    )


def refusal(session: str) -> str:
    """The proxy's one answer for an unknown session, a foreign namespace, a wrong token."""
    return (
        f"session {session} is not available to this caller: no such session, no right to "
        "use sessions in its namespace, or not its runtime token (from Claim or Connect)"
    )


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with contextlib.AsyncExitStack() as stack:
        runtimes = []
        for i in range(2):
            workdir = tmp_path / f"sandbox-{i}"
            workdir.mkdir()
            runtime, token = await stack.enter_async_context(
                running_runtime(workdir, default_timeout_s=20.0)
            )
            runtimes.append((runtime, token, workdir))
        api, kube = await stack.enter_async_context(running_api())
        api.accept(USER_TOKEN, "system:serviceaccount:rl:trainer")
        api.allow("system:serviceaccount:rl:trainer", "create", "team-a")
        claimer = StandInClaimer(
            [(f"pod-{i}", f"127.0.0.1:{r.port}", t) for i, (r, t, _) in enumerate(runtimes)]
        )
        server = await stack.enter_async_context(running_gateway(kube, claimer))
        gateway = Gateway(server, api, runtimes)
        stack.push_async_callback(gateway.channel.close)
        yield gateway


async def test_run_command_goes_to_the_claimed_sandbox(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    response = await gw.bash.RunCommand(
        bash_pb.RunCommandRequest(command="echo hello; pwd"),
        metadata=session_metadata(sandbox),
        timeout=20,
    )
    assert response.stdout.splitlines() == ["hello", str(gw.runtimes[0][2])]
    assert response.exit_code == 0


async def test_stream_command_chunks_arrive_before_the_command_ends(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    call = gw.bash.StreamCommand(
        bash_pb.StreamCommandRequest(command="echo first; sleep 2; echo second"),
        metadata=session_metadata(sandbox),
        timeout=20,
    )
    started = time.monotonic()
    seen: list[tuple[float, bash_pb.StreamCommandResponse]] = []
    async for message in call:
        seen.append((time.monotonic() - started, message))
    first_chunk = next(t for t, m in seen if m.HasField("chunk") and "first" in m.chunk.text)
    end, result = seen[-1]
    assert result.HasField("result") and result.result.exit_code == 0
    assert first_chunk < 1.5 <= end  # streamed through, not buffered until the end


async def test_a_5_mib_binary_file_uploads_and_downloads_byte_exact(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    content = os.urandom(5 * 1024 * 1024)
    path = str(gw.runtimes[0][2] / "data" / "blob.bin")

    async def parts() -> AsyncIterator[file_pb.UploadFileRequest]:
        header = file_pb.UploadFileHeader(path=path, make_parents=True)
        yield file_pb.UploadFileRequest(header=header)
        for offset in range(0, len(content), 256 * 1024):
            yield file_pb.UploadFileRequest(chunk=content[offset : offset + 256 * 1024])

    uploaded = await gw.files.UploadFile(parts(), metadata=session_metadata(sandbox), timeout=30)
    assert uploaded.size == len(content)
    assert uploaded.sha256 == hashlib.sha256(content).hexdigest()
    assert (gw.runtimes[0][2] / "data" / "blob.bin").read_bytes() == content

    received = bytearray()
    async for part in gw.files.DownloadFile(
        file_pb.DownloadFileRequest(path=path),
        metadata=session_metadata(sandbox),
        timeout=30,
    ):
        if part.HasField("chunk"):
            received += part.chunk
        else:
            assert part.header.size == len(content)
    assert bytes(received) == content


async def test_an_upload_the_runtime_refuses_early_ends_with_its_status(gw: Gateway) -> None:
    """The runtime's refusal reaches the caller through the proxy. grpc's Python client has a
    race of its own here: a server that ends a client stream while the client is still writing
    is sometimes seen as INTERNAL "Internal error from Core" even with no proxy at all (2 of 40
    direct uploads to a runtime on 127.0.0.1). So: several attempts, the refusal seen at least
    once, and nothing but that race otherwise (a proxy that garbled the status would fail)."""
    (sandbox,) = await gw.claim()

    async def parts() -> AsyncIterator[file_pb.UploadFileRequest]:
        yield file_pb.UploadFileRequest(header=file_pb.UploadFileHeader(path="relative.bin"))
        # The stream stays open while the refusal travels back; the pause makes the race
        # above rarer (under load the client was mid-write on all 4 of 4 attempts once).
        await asyncio.sleep(0.5)
        for _ in range(64):
            yield file_pb.UploadFileRequest(chunk=b"x" * 65536)

    outcomes = []
    for _ in range(6):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gw.files.UploadFile(parts(), metadata=session_metadata(sandbox), timeout=30)
        outcomes.append((refused.value.code(), refused.value.details() or ""))
    refusals = [d for code, d in outcomes if code == grpc.StatusCode.INVALID_ARGUMENT]
    assert refusals, outcomes
    assert all("'relative.bin' is not absolute" in details for details in refusals)
    races = [o for o in outcomes if o[0] != grpc.StatusCode.INVALID_ARGUMENT]
    assert all(o == (grpc.StatusCode.INTERNAL, "Internal error from Core") for o in races), outcomes


async def test_editor_calls_and_stats_pass_through(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    metadata = session_metadata(sandbox)
    path = str(gw.runtimes[0][2] / "notes.txt")
    await gw.editor.Create(
        editor_pb.CreateRequest(path=path, file_text="one\ntwo\n"), metadata=metadata, timeout=10
    )
    view = await gw.editor.View(editor_pb.ViewRequest(path=path), metadata=metadata, timeout=10)
    assert "two" in view.output
    stats = await gw.system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
    assert stats.uptime_seconds > 0


async def test_a_wrong_token_gets_the_proxys_one_refusal(gw: Gateway) -> None:
    """The runtime refuses the token (UNAUTHENTICATED); the caller sees what an unknown
    session gets, so a wrong token tells nothing a wrong name would not."""
    (sandbox,) = await gw.claim()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gw.bash.RunCommand(
            bash_pb.RunCommandRequest(command="true"),
            metadata=session_metadata(sandbox, token="not-the-session-token"),
            timeout=10,
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details() == refusal(f"team-a/{sandbox.name}")


async def test_an_unknown_session_is_refused_from_the_index_without_a_lookup(
    gw: Gateway,
) -> None:
    metadata = (("authorization", "Bearer x"), (GATEWAY_SESSION_METADATA, "team-a/nope"), CALLER)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await gw.system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
    assert missing.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert missing.value.details() == refusal("team-a/nope")
    assert not [key for key in gw.api.requests if key[0] == "GET"]


async def test_a_session_created_a_moment_after_the_call_is_waited_for(gw: Gateway) -> None:
    """Claimed through another replica an instant ago: the watch brings it while the call
    waits (bounded), and the claimer's pod index has its address."""
    runtime, token, _ = gw.runtimes[1]
    claimer = gw.server.claimer
    assert isinstance(claimer, StandInClaimer)
    claimer.pod_addresses[("team-a", "pod-late")] = f"127.0.0.1:{runtime.port}"
    metadata = (
        ("authorization", f"Bearer {token}"),
        (GATEWAY_SESSION_METADATA, "team-a/late"),
        CALLER,
    )
    call = asyncio.ensure_future(
        gw.system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
    )
    await asyncio.sleep(0.3)
    gw.api.put_session(session_object("team-a", "late", phase=None, pod="pod-late"))
    stats = await call
    assert stats.uptime_seconds > 0
    assert not [key for key in gw.api.requests if key[0] == "GET"]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ((("authorization", "Bearer x"), CALLER), "the call names no session"),
        (
            (("authorization", "Bearer x"), (GATEWAY_SESSION_METADATA, "no-slash"), CALLER),
            "'no-slash' is not '<namespace>/<name>'",
        ),
    ],
)
async def test_a_call_without_a_session_is_invalid(
    gw: Gateway, metadata: Metadata, message: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await gw.system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (invalid.value.details() or "")


async def test_two_sessions_on_two_runtimes_are_never_crossed(gw: Gateway) -> None:
    first, second = await gw.claim(count=2)

    async def whoami(sandbox: gateway_pb.ClaimedSandbox, i: int) -> str:
        response = await gw.bash.RunCommand(
            bash_pb.RunCommandRequest(command=f"echo {i} $PWD"),
            metadata=session_metadata(sandbox),
            timeout=20,
        )
        return response.stdout.strip()

    answers = await asyncio.gather(*(whoami((first, second)[i % 2], i) for i in range(12)))
    for i, answer in enumerate(answers):
        assert answer == f"{i} {gw.runtimes[i % 2][2]}"
    # One session's token is worthless on the other's route.
    with pytest.raises(grpc.aio.AioRpcError) as crossed:
        await gw.system.GetStats(
            system_pb.GetStatsRequest(),
            metadata=session_metadata(second, token=first.token),
            timeout=10,
        )
    assert crossed.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_cancelling_the_call_cancels_it_upstream(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    runtime_port = gw.runtimes[0][0].port
    call = gw.bash.StreamCommand(
        bash_pb.StreamCommandRequest(command="echo started; sleep 60"),
        metadata=session_metadata(sandbox),
        timeout=90,
    )
    async for message in call:
        if message.HasField("chunk") and "started" in message.chunk.text:
            break
    direct = grpc.aio.insecure_channel(f"127.0.0.1:{runtime_port}")
    stats = system_grpc.SystemServiceStub(direct)
    metadata = (("authorization", f"Bearer {sandbox.token}"),)
    try:
        before = await stats.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=5)
        assert before.running_commands == 1
        call.cancel()
        deadline = time.monotonic() + 10
        while True:
            now = await stats.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=5)
            if now.running_commands == 0:
                break
            assert time.monotonic() < deadline, "the upstream command still runs"
            await asyncio.sleep(0.1)
    finally:
        await direct.close()


async def test_finished_and_starting_sessions_are_refused_with_their_phase(gw: Gateway) -> None:
    gw.api.put_session(session_object("team-a", "done", phase="Expired", pod_ip="127.0.0.1"))
    gw.api.put_session(session_object("team-a", "slow", phase="Starting"))
    for name, code, text in [
        ("done", grpc.StatusCode.FAILED_PRECONDITION, "session team-a/done has ended"),
        ("slow", grpc.StatusCode.UNAVAILABLE, "session team-a/slow is not ready yet"),
    ]:
        metadata = (
            ("authorization", "Bearer x"),
            (GATEWAY_SESSION_METADATA, f"team-a/{name}"),
            CALLER,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gw.system.GetStats(system_pb.GetStatsRequest(), metadata=metadata, timeout=10)
        assert refused.value.code() == code
        assert text in (refused.value.details() or "")


async def test_a_session_claimed_elsewhere_is_routed_from_its_pod(gw: Gateway) -> None:
    """Claimed by another replica a moment ago: on the watch, no status yet; the address
    comes from the claimer's pod index, not from the API server."""
    claimer = gw.server.claimer
    assert isinstance(claimer, StandInClaimer)
    claimer.pod_addresses[("team-a", "pod-x")] = "x:50051"
    session = session_object("team-a", "elsewhere", phase=None)
    session["metadata"]["annotations"] = {"sandfleet.dev/claimed-pod": "pod-x"}
    gw.api.put_session(session)
    route = await gw.server.routes.resolve("team-a", "elsewhere")
    assert route is not None and route.pod == "pod-x" and route.address == "x:50051"
    assert route.ready
    assert not [key for key in gw.api.requests if key[0] == "GET"]


async def test_a_pod_that_does_not_answer_is_unavailable_with_its_name(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    await gw.runtimes[0][0].stop(grace_s=None)
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await gw.system.GetStats(
            system_pb.GetStatsRequest(), metadata=session_metadata(sandbox), timeout=10
        )
    assert gone.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"sandbox team-a/{sandbox.name} (pod pod-0" in (gone.value.details() or "")
    assert "does not answer" in (gone.value.details() or "")


async def test_a_deleted_session_closes_its_channel(gw: Gateway) -> None:
    (sandbox,) = await gw.claim()
    await gw.system.GetStats(
        system_pb.GetStatsRequest(), metadata=session_metadata(sandbox), timeout=10
    )
    assert len(gw.server.channels) == 1
    gw.api.put_session(session_object("team-a", sandbox.name, phase=None, pod="pod-0"))
    gw.api.delete_session("team-a", sandbox.name)
    deadline = time.monotonic() + 5
    while len(gw.server.channels):
        assert time.monotonic() < deadline, "the channel stayed open"
        await asyncio.sleep(0.05)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await gw.system.GetStats(
            system_pb.GetStatsRequest(), metadata=session_metadata(sandbox), timeout=10
        )
    assert missing.value.code() == grpc.StatusCode.PERMISSION_DENIED
