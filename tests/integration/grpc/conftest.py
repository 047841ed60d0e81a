"""A real runtime agent on loopback plus an authenticated client, per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet_runtime.server import RuntimeServer
from tests.support.runtime_server import running_runtime


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[RuntimeServer, str]]:
    async with running_runtime(tmp_path, default_timeout_s=20.0) as started:
        yield started


@pytest.fixture
async def client(runtime: tuple[RuntimeServer, str]) -> AsyncIterator[RuntimeClient]:
    server, token = runtime
    client = RuntimeClient(f"127.0.0.1:{server.port}", token)
    yield client
    await client.close()
