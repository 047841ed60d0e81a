"""A scripted upstream and `sandfleet serve` in front of it, for each test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.serve.harness import RunningServer, serving, write_config
from tests.support.scripted_openai import ScriptedOpenAIServer


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
async def server(tmp_path: Path, upstream: ScriptedOpenAIServer) -> AsyncIterator[RunningServer]:
    async with serving(write_config(tmp_path, upstream.base_url)) as running:
        yield running
