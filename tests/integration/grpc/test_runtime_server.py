"""The runtime agent over real gRPC on loopback: auth, health, reflection, every service."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from sandfleet_proto.runtime.v1 import file_service_pb2 as file_pb
from sandfleet_proto.runtime.v1 import file_service_pb2_grpc as file_grpc
from sandfleet_runtime.server import RuntimeServer
from tests.support.runtime_server import spawn_runtime_process

pytestmark = pytest.mark.integration


async def test_health_answers_without_a_token(runtime: tuple[RuntimeServer, str]) -> None:
    server, _ = runtime
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        overall = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        bash = await stub.Check(
            health_pb2.HealthCheckRequest(service="sandfleet.runtime.v1.BashService"), timeout=5
        )
    assert overall.status == bash.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    "metadata", [(), (("authorization", "Bearer wrong"),), (("authorization", "wrong"),)]
)
async def test_a_missing_or_wrong_token_is_unauthenticated(
    runtime: tuple[RuntimeServer, str], metadata: tuple[tuple[str, str], ...], tmp_path: Path
) -> None:
    server, _ = runtime
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = bash_grpc.BashServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as unary:
            await stub.RunCommand(
                bash_pb.RunCommandRequest(command=f"touch {tmp_path}/ran"),
                metadata=metadata,
                timeout=5,
            )
        files = file_grpc.FileServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as streaming:
            async for _ in files.DownloadFile(
                file_pb.DownloadFileRequest(path="/etc/hostname"), metadata=metadata, timeout=5
            ):
                pass
    assert unary.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert streaming.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not (tmp_path / "ran").exists()


async def test_a_rotated_token_replaces_the_old_one(runtime: tuple[RuntimeServer, str]) -> None:
    server, token = runtime
    client = RuntimeClient(f"127.0.0.1:{server.port}", token)
    try:
        server.auth.rotate("new-token")
        with pytest.raises(SandboxLostError, match="UNAUTHENTICATED"):
            await client.run_command("true")
        client.rotate_token("new-token")
        assert (await client.run_command("echo ok")).stdout == "ok\n"
    finally:
        await client.close()


async def test_reflection_lists_every_service(runtime: tuple[RuntimeServer, str]) -> None:
    server, token = runtime
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        call = stub.ServerReflectionInfo(
            iter([request]), metadata=(("authorization", f"Bearer {token}"),), timeout=5
        )
        names = {s.name async for r in call for s in r.list_services_response.service}
    assert {
        "sandfleet.runtime.v1.BashService",
        "sandfleet.runtime.v1.EditorService",
        "sandfleet.runtime.v1.FileService",
        "sandfleet.runtime.v1.SystemService",
        "grpc.health.v1.Health",
    } <= names


async def test_run_command_reports_exit_code_streams_and_cwd(
    client: RuntimeClient, tmp_path: Path
) -> None:
    result = await client.run_command("cd /tmp && echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.timed_out
    # `exit` ends the shell, so the session restarted fresh in its initial directory.
    assert result.shell_exited
    again = await client.run_command("pwd")
    assert again.stdout.strip() == str(tmp_path)


async def test_session_state_persists_between_rpcs(client: RuntimeClient) -> None:
    await client.run_command('cd /tmp; export GREETING=hi; shout() { echo "$1!"; }')
    result = await client.run_command('pwd; echo "$GREETING"; shout hey')
    assert result.stdout == "/tmp\nhi\nhey!\n"


async def test_timeout_is_a_result_not_an_error(client: RuntimeClient) -> None:
    result = await client.run_command("echo started; sleep 30", timeout_s=1)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "started\n"
    assert (await client.run_command("echo alive")).stdout == "alive\n"


async def test_stream_command_yields_chunks_then_the_result(client: RuntimeClient) -> None:
    events = [e async for e in client.stream_command("echo one; echo two >&2; echo three")]
    chunks = [e for e in events if isinstance(e, tuple)]
    result = events[-1]
    assert not isinstance(result, tuple)
    assert "".join(t for s, t in chunks if s == "stdout") == "one\nthree\n"
    assert "".join(t for s, t in chunks if s == "stderr") == "two\n"
    assert result.stdout == "one\nthree\n" and result.exit_code == 0


async def test_interrupt_stops_a_running_command(client: RuntimeClient) -> None:
    running = asyncio.ensure_future(client.run_command("sleep 30", session="s1", timeout_s=60))
    for _ in range(200):  # wait until the runtime reports the command as running
        if (await client.stats()).running_commands:
            break
        await asyncio.sleep(0.01)
    assert await client.interrupt("s1")
    result = await asyncio.wait_for(running, 10)
    assert result.interrupted


async def test_editor_errors_are_tool_errors_with_model_readable_text(
    client: RuntimeClient, tmp_path: Path
) -> None:
    with pytest.raises(ToolError) as relative:
        await client.view("relative/path.txt")
    assert relative.value.code == "INVALID_ARGUMENT" and "absolute path" in str(relative.value)
    target = tmp_path / "a.txt"
    assert "created" in await client.create(str(target), file_text="x = 1\n")
    with pytest.raises(ToolError) as exists:
        await client.create(str(target), file_text="again")
    assert exists.value.code == "ALREADY_EXISTS"
    with pytest.raises(ToolError) as missing:
        await client.str_replace(str(target), old_str="y = 2", new_str="")
    assert missing.value.code == "FAILED_PRECONDITION"
    view = await client.view(str(target))
    assert "     1\tx = 1" in view


async def test_upload_and_download_100_mb_keep_content_and_mode(
    client: RuntimeClient, tmp_path: Path
) -> None:
    source = tmp_path / "big.bin"
    with source.open("wb") as out:
        for _ in range(100):
            out.write(os.urandom(1024 * 1024))
    source.chmod(0o750)
    uploaded = await client.upload(source, str(tmp_path / "in" / "big.bin"))
    expected = hashlib.sha256(source.read_bytes()).hexdigest()
    assert (uploaded.size, uploaded.sha256) == (100 * 1024 * 1024, expected)
    back = tmp_path / "back.bin"
    assert await client.download(str(tmp_path / "in" / "big.bin"), back) == 100 * 1024 * 1024
    assert hashlib.sha256(back.read_bytes()).hexdigest() == expected
    assert back.stat().st_mode & 0o777 == 0o750


async def test_stats_report_memory_processes_and_activity(client: RuntimeClient) -> None:
    before = await client.stats()
    await client.run_command("sleep 5 &", session="bg")
    after = await client.stats()
    assert after.memory_current_bytes > 0 and after.memory_peak_bytes >= after.memory_current_bytes
    assert after.process_count > before.process_count
    assert after.last_activity_unix >= before.last_activity_unix
    assert after.bash_sessions >= 1


async def test_sigterm_shuts_down_gracefully_and_leaves_no_processes(tmp_path: Path) -> None:
    proc, port = await asyncio.to_thread(spawn_runtime_process, tmp_path, "tok")
    client = RuntimeClient(f"127.0.0.1:{port}", "tok")
    try:
        await client.run_command(
            f"sleep 1000 & echo $! > {tmp_path}/bg.pid; "
            f"(setsid sleep 1001 & echo $! > {tmp_path}/daemon.pid) ; true"
        )
    finally:
        await client.close()
    pids = [int((tmp_path / f).read_text()) for f in ("bg.pid", "daemon.pid")]
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 20) == 0
    for pid in pids:
        assert not _alive(pid), f"process {pid} survived the runtime's shutdown"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_runtime_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDFLEET_RUNTIME_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "sandfleet_runtime", "--listen", "127.0.0.1:0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0 and "no token" in proc.stderr
