"""SyncSandbox on a real local sandbox: blocking calls from plain threads, close reclaims it."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.sandbox.sync import SyncSandbox
from tests.integration.local.conftest import config_for

pytestmark = pytest.mark.integration


def test_a_local_sync_sandbox_runs_tools_and_moves_files(tmp_path: Path) -> None:
    local_file = tmp_path / "in.txt"
    local_file.write_text("alpha\n")
    with SyncSandbox.local(config_for("none", tmp_path / "state"), tool_timeout_s=30) as sandbox:
        workdir = sandbox.sandbox.paths.working_dir
        sandbox.upload(local_file, f"{workdir}/in.txt")
        seen = sandbox.call_tool("execute_bash", {"command": "cat in.txt; echo $((6*7))"})
        edited = sandbox.call_tool(
            "str_replace_editor",
            {"command": "str_replace", "path": f"{workdir}/in.txt", "old_str": "alpha",
             "new_str": "beta"},
        )  # fmt: skip
        written = sandbox.download(f"{workdir}/in.txt", tmp_path / "out.txt")
        # Many plain threads at once share the sandbox's one event loop.
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: sandbox.bash(f"echo {i}").stdout, range(8)))
        names = [entry.path for entry in sandbox.list_files(workdir)]
        client = sandbox.sandbox.client

    assert "alpha\n42" in seen and "has been edited" in edited
    assert (written, (tmp_path / "out.txt").read_text()) == (5, "beta\n")
    assert results == [f"{i}\n" for i in range(8)]
    assert any(name.endswith("in.txt") for name in names)
    # Closed: the local runtime is gone; a new client with its token finds nothing there.
    token = dict(client._connection.metadata)["authorization"].removeprefix("Bearer ")
    with pytest.raises(SandboxLostError, match="UNAVAILABLE"):
        asyncio.run(_stats(client.address, token))
    sandbox.close()  # closing twice does nothing


async def _stats(address: str, token: str) -> None:
    client = RuntimeClient(address, token)  # made on this loop: grpc.aio channels keep theirs
    try:
        await client.stats()
    finally:
        await client.close()
