"""A real S3-compatible server for tests: SeaweedFS's `weed server -s3` (Apache-2.0), built
by tests/objectstore/setup.sh, on 127.0.0.1 with a temporary folder and one access key.

One process runs SeaweedFS's master, volume server, filer and S3 gateway; every port is
picked free on loopback, telemetry and the side services (Iceberg, Lance, metrics) are off.
Without the build the tests skip with the setup command as the reason, unless
SANDFLEET_REQUIRE_OBJECTSTORE=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEEDBUILD = ROOT / "tests" / "objectstore" / "weedbuild" / "go.mod"
SETUP = "bash tests/objectstore/setup.sh"
START_TIMEOUT_S = 120.0
"""Generous: the server is ready in a few seconds, but the machine may be shared and loaded."""
BUCKET = "sandfleet-test"


def weed_version() -> str:
    found = re.search(r"github\.com/seaweedfs/seaweedfs (v\S+)", WEEDBUILD.read_text())
    assert found, f"no seaweedfs version in {WEEDBUILD}"
    return found.group(1)


def weed_binary() -> Path:
    """Where setup.sh puts the build (it may not be there)."""
    cache = os.environ.get("SANDFLEET_OBJECTSTORE_CACHE")
    base = Path(cache) if cache else Path.home() / ".cache" / "sandfleet" / "seaweedfs"
    return base / weed_version() / "weed"


def weed_or_skip() -> Path:
    """The weed binary, else skip (or fail when SANDFLEET_REQUIRE_OBJECTSTORE=1)."""
    binary = weed_binary()
    if os.access(binary, os.X_OK):
        return binary
    reason = f"the SeaweedFS test server is not built ({SETUP})"
    if os.environ.get("SANDFLEET_REQUIRE_OBJECTSTORE") == "1":
        pytest.fail(
            f"object store required (SANDFLEET_REQUIRE_OBJECTSTORE=1) but {reason}", pytrace=False
        )
    pytest.skip(reason)


@dataclasses.dataclass
class SeaweedServer:
    """A running server: its S3 endpoint, one identity, and how to stop it."""

    endpoint: str
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    filer: str
    """The filer's HTTP address (object metadata the S3 API does not show)."""
    process: subprocess.Popen[bytes]
    log: Path
    grpc_sockets: list[Path] = dataclasses.field(default_factory=list)
    """Unix sockets weed opens beside its gRPC ports in /tmp (no flag moves them): removed
    after it stops, since a killed weed leaves them behind."""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 2 s (a graceful stop takes weed 15 s, and the data is
        thrown away anyway); the whole process group; idempotent."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for socket_file in self.grpc_sockets:
            socket_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1 (all held open together while picked)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _identities(access_key: str, secret_key: str) -> dict[str, object]:
    return {
        "identities": [
            {
                "name": "sandfleet-test",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


def _command(weed: Path, folder: Path, config: Path, ports: list[int]) -> list[str]:
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = ports
    return [
        str(weed), "server", "-s3", "-filer",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-dir={folder / 'data'}",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=16",
        f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={folder / 'filer.sock'}",
        f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
        f"-s3.localSocket={folder / 's3.sock'}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-metricsPort=0",
    ]  # fmt: skip


def start_seaweed(weed: Path, folder: Path) -> SeaweedServer:
    """Start a server in `folder` and wait until an authenticated write into BUCKET works
    (which also creates the bucket). Blocks: from async code call it in a thread. A server
    that exits at once (another process took a picked port meanwhile) is started again on
    other ports, twice at most."""
    for attempt in range(3):
        try:
            return _start_once(weed, folder / f"attempt-{attempt}")
        except _ExitedEarlyError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _ExitedEarlyError(RuntimeError):
    pass


def _start_once(weed: Path, folder: Path) -> SeaweedServer:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    access_key, secret_key = "sandfleet" + secrets.token_hex(4), secrets.token_hex(16)
    config = folder / "s3.json"
    config.write_text(json.dumps(_identities(access_key, secret_key)))
    ports = free_ports(8)
    log = folder / "weed.log"
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            _command(weed, folder, config, ports),
            # SSE-S3 needs a key-encryption key; any string, which weed derives its KEK from.
            env={**os.environ, "WEED_S3_SSE_KEY": secrets.token_hex(16)},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = SeaweedServer(
        endpoint=f"http://127.0.0.1:{ports[6]}",
        access_key=access_key,
        secret_key=secret_key,
        filer=f"http://127.0.0.1:{ports[4]}",
        process=process,
        log=log,
        grpc_sockets=[
            Path(f"/tmp/seaweedfs-{role}-grpc-{port}.sock")
            for role, port in zip(("master", "volume", "filer", "s3"), ports[1::2], strict=True)
        ],
    )
    try:
        _wait_until_writable(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_writable(server: SeaweedServer) -> None:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=server.endpoint,
        region="us-east-1",
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        client_options={"allow_http": True, "connect_timeout": "2s", "timeout": "10s"},
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=5)},
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    last = "not started"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise _ExitedEarlyError(
                f"weed exited {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            obstore.put(store, ".ready", b"ready")
            obstore.delete(store, ".ready")
            return
        except Exception as error:  # noqa: BLE001 - any failure means "not yet"
            last = str(error).splitlines()[0] if str(error) else type(error).__name__
        time.sleep(0.2)
    raise RuntimeError(
        f"SeaweedFS not writable after {START_TIMEOUT_S:.0f} s ({last}):\n{server.log_tail()}"
    )


@contextlib.contextmanager
def running_seaweed(folder: Path) -> Iterator[SeaweedServer]:
    """A server for the block's duration (skips, or fails under CI, when it is not built)."""
    server = start_seaweed(weed_or_skip(), folder)
    try:
        yield server
    finally:
        server.stop()
