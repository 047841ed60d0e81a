"""StreamCommand stays bounded: backpressure on a slow client, output capped like RunCommand."""

from __future__ import annotations

import asyncio
import secrets
import signal
from pathlib import Path

import grpc
import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from sandfleet_runtime.bash.output import OutputStream
from sandfleet_runtime.streaming import ChunkStream
from tests.integration.runtime.conftest import SessionsFactory
from tests.support.runtime_server import spawn_runtime_process

pytestmark = pytest.mark.integration

_MIB = 1024 * 1024


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_stream_nobody_reads_keeps_the_agent_small_and_serving(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(16)
    proc, port = await asyncio.to_thread(spawn_runtime_process, tmp_path, token)
    address = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(address)
    client = RuntimeClient(address, token)
    try:
        await client.run_command("true")  # sessions and imports warm before the baseline
        baseline = _rss_bytes(proc.pid)
        request = bash_pb.StreamCommandRequest(
            session="flood", command="yes", timeout_seconds=60, max_output_chars=1_000_000
        )
        call = bash_grpc.BashServiceStub(channel).StreamCommand(
            request, metadata=(("authorization", f"Bearer {token}"),)
        )
        peak = baseline
        for _ in range(8):  # ~4 s of `yes` at full speed
            await asyncio.sleep(0.5)
            peak = max(peak, _rss_bytes(proc.pid))
            answer = await client.run_command("echo alive", session="other", timeout_s=30)
            assert answer.stdout == "alive\n"
        assert peak - baseline < 64 * _MIB, f"agent grew by {(peak - baseline) / _MIB:.0f} MiB"
        call.cancel()
    finally:
        await client.close()
        await channel.close(grace=None)
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 20)


async def test_a_stream_sends_at_most_the_cap_then_a_marker_and_the_clipped_result(
    tmp_path: Path,
) -> None:
    token = secrets.token_urlsafe(16)
    proc, port = await asyncio.to_thread(spawn_runtime_process, tmp_path, token)
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        streamed: list[str] = []
        result = None
        async for event in client.stream_command("seq 1 100000", timeout_s=60):
            if isinstance(event, tuple):
                streamed.append(event[1])
            else:
                result = event
        text = "".join(streamed)
        assert text.startswith("1\n2\n3\n")
        assert "<stream clipped: this output reached 10,000 characters" in text
        assert len(text) < 10_000 + 300
        assert result is not None and result.truncated and result.exit_code == 0
        assert result.stdout.startswith("1\n2\n") and result.stdout.endswith("99999\n100000\n")
        assert "<response clipped:" in result.stdout
    finally:
        await client.close()
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 20)


async def test_a_full_listener_pauses_the_command_until_it_drains(
    make_sessions: SessionsFactory, tmp_path: Path
) -> None:
    sessions = make_sessions()
    chunks = ChunkStream(1_000_000, max_buffered_chars=64 * 1024)
    command = "head -c 4000000 /dev/zero | tr '\\0' a; echo finished > marker"
    run = asyncio.ensure_future(
        sessions.run("s", command, max_output_chars=1_000_000, listener=chunks.put)
    )
    await asyncio.sleep(1.5)
    # Nobody drained: the reader paused with the buffer just past its bound, the pipe filled,
    # and the writer is blocked.
    assert not run.done() and not (tmp_path / "marker").exists()
    assert 64 * 1024 <= chunks.buffered_chars < 64 * 1024 + 65536 * 16
    received = 0
    async for stream, text in chunks.until(run):
        assert stream is OutputStream.STDOUT
        received += len(text)
    result = run.result()
    assert result.exit_code == 0 and (tmp_path / "marker").exists()
    assert result.stdout_total_bytes == 4_000_000
    assert 1_000_000 <= received < 1_000_000 + 300  # the cap, then the marker
