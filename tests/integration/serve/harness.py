"""`sandfleet serve` in this process on a free 127.0.0.1 port (uvicorn, real HTTP), with a
scripted upstream over real HTTP, for the official `openai` client to talk to."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn

from sandfleet.serve.app import create_app
from sandfleet.serve.config import load_serve_config
from sandfleet.serve.service import ServeService

MODEL = "sandboxed"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_config(
    folder: Path,
    upstream_url: str,
    *,
    server: str = "",
    model: str = "",
    extra: str = "",
    warm: int = 0,
    max_retries: int = 0,
) -> Path:
    """A served-models file: one model on `upstream_url`, namespaced local sandboxes.
    `max_retries` 0 (the default here, 2 in serve): a scripted failure reaches the client."""
    path = folder / "serve.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [server]
            state_dir = "{folder / "state"}"
            conversation_ttl_seconds = 600
            {server}

            [models.{MODEL}]
            upstream.base_url = "{upstream_url}"
            upstream.model = "m"
            max_turns = 6
            max_retries = {max_retries}
            tool_timeout_seconds = 30
            isolation = "auto"
            warm = {warm}
            {model}
            """
        )
        + textwrap.dedent(extra)
    )
    return path


class RunningServer:
    def __init__(self, service: ServeService, port: int) -> None:
        self.service = service
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def client(self, **kwargs: object) -> openai.AsyncOpenAI:
        settings: dict[str, Any] = {"api_key": "unused", "max_retries": 0, **kwargs}
        return openai.AsyncOpenAI(base_url=self.base_url, **settings)


@contextlib.asynccontextmanager
async def serving(config_path: Path) -> AsyncIterator[RunningServer]:
    """The server from `config_path`, stopped (and every sandbox released) at exit."""
    service = ServeService(load_serve_config(config_path))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(service), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield RunningServer(service, port)
    finally:
        server.should_exit = True
        async with asyncio.timeout(60):
            await task


async def raw_post(
    server: RunningServer, path: str, content: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    """A POST the openai client would not send (malformed JSON, a huge body)."""
    sent = {"content-type": "application/json", **(headers or {})}
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        return await client.post(path, content=content, headers=sent)
