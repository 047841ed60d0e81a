"""`sandfleet mcp` as a real subprocess, driven by the MCP SDK's own clients."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from tests.integration.cli.harness import cli_command, cli_environment

API_KEY = "test-key-0123456789abcdef"
TOOL_NAMES = ["str_replace_editor", "execute_bash", "upload_file", "download_file", "reset"]


def text(result: CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


def runtime_pids(state_dir: Path) -> set[int]:
    """The sandboxes' runtime agents: host processes below `state_dir` that are not the MCP
    server itself (its command line names the state dir too)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(state_dir).encode() in a for a in arguments) and b"mcp" not in arguments:
            found.add(int(entry.name))
    return found


async def wait_for_no_runtime(state_dir: Path, timeout_s: float = 30) -> set[int]:
    """The runtime processes still left under `state_dir` after at most `timeout_s`."""
    for _ in range(int(timeout_s / 0.2)):
        if not runtime_pids(state_dir):
            break
        await asyncio.sleep(0.2)
    return runtime_pids(state_dir)


def server_arguments(state_dir: Path, *extra: str) -> list[str]:
    return ["mcp", "--state-dir", str(state_dir), "--log-level", "INFO", *extra]


@contextlib.asynccontextmanager
async def stdio_session(home: Path, state_dir: Path) -> AsyncIterator[ClientSession]:
    command, *arguments = cli_command(*server_arguments(state_dir))
    params = StdioServerParameters(
        command=command, args=arguments, env=cli_environment(home), cwd=str(home)
    )
    with (home / "server-stderr.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def http_server(
    home: Path, state_dir: Path, *extra: str, key: str = API_KEY
) -> AsyncIterator[str]:
    """`sandfleet mcp --transport http` on a free loopback port; yields its /mcp URL and
    checks, when it stops, that it exited on its own after SIGINT."""
    port = free_port()
    env = cli_environment(home, SANDFLEET_MCP_API_KEY=key)
    with (home / "server-stderr.log").open("w") as errlog:
        process = await asyncio.create_subprocess_exec(
            *cli_command(
                *server_arguments(state_dir, "--transport", "http", "--port", str(port), *extra)
            ),
            env=env,
            cwd=home,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=errlog,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with asyncio.timeout(60), httpx.AsyncClient() as probe:
            while True:
                try:
                    await probe.get(url)
                    break
                except httpx.TransportError:
                    assert process.returncode is None, (home / "server-stderr.log").read_text()
                    await asyncio.sleep(0.2)
        yield url
    finally:
        if process.returncode is None:
            process.send_signal(2)  # SIGINT, as Ctrl-C
            async with asyncio.timeout(60):
                await process.wait()


@contextlib.asynccontextmanager
async def http_session(
    url: str, key: str = API_KEY, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}", **(headers or {})}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
