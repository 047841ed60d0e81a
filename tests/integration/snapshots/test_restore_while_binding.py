"""The operator's resume restore, between real runtimes and a volume store: the tree streams
in with the pool's token while the bind runs, the shells are replayed once it is done, and a
restore that loses the race to the bind starts over with the session's token."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.fleet.resources import ObjectRef
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.sandbox_lease import PendingBind
from sandfleet.operator.suspension import restore_snapshot, snapshot_key
from sandfleet.snapshots.archive import with_state
from sandfleet.snapshots.shell_state import capture, live_sessions
from sandfleet.snapshots.volume import VolumeSnapshotStore
from tests.integration.runtime.tree_support import make_sample_tree, tree_picture
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

UID = "0f6b3c4e-1a2b-4c3d-9e8f-7a6b5c4d3e2f"
SESSION = ObjectRef("team-a", "sbx-resume", UID, "SandboxSession", "sandfleet.dev/v1alpha1")
SESSION_TOKEN = secrets.token_urlsafe(32)


@pytest.fixture
async def stored(tmp_path: Path) -> AsyncIterator[tuple[OperatorContext, dict[str, Any], Path]]:
    """A snapshot of a sample tree and one shell (cd'd into src, STAGE exported), the
    working tree only (a restore of HOME or /tmp would replace the test machine's)."""
    source = tmp_path / "source"
    make_sample_tree(source)
    store = VolumeSnapshotStore(tmp_path / "store")
    async with running_runtime(source) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await client.run_command("cd src && export STAGE=2")
            shells = await capture(client, await live_sessions(client))
            state = {"token": SESSION_TOKEN, "shells": shells, "extra_roots": []}
            saved = await store.put(
                snapshot_key(SESSION), with_state(state, client.snapshot()), limit_bytes=1 << 30
            )
        finally:
            await client.close()
    snapshot = {
        "suspendedTime": dt.datetime.fromtimestamp(saved.stored_at, dt.UTC).isoformat(),
        "sizeBytes": saved.size_bytes,
        "sha256": saved.sha256,
    }
    yield cast(OperatorContext, types.SimpleNamespace(snapshots=store)), snapshot, source


async def _bind(address: str, pool_token: str, after: asyncio.Event | None) -> None:
    if after is not None:
        await after.wait()
    client = RuntimeClient(address, pool_token)
    try:
        await client.bind_session(SESSION_TOKEN, {}, "team-a/sbx-resume")
    finally:
        await client.close()


async def _check_resumed(address: str, pool_token: str, target: Path, source: Path) -> None:
    assert tree_picture(target) == tree_picture(source)
    client = RuntimeClient(address, SESSION_TOKEN)
    pool_client = RuntimeClient(address, pool_token)
    try:
        result = await client.run_command("pwd; echo $STAGE")
        # The saved cwd is replayed as it was (on a cluster both trees are /testbed).
        assert result.stdout.split() == [str(source / "src"), "2"]
        with pytest.raises(SandboxLostError, match="UNAUTHENTICATED"):
            await pool_client.run_command("true")
    finally:
        await client.close()
        await pool_client.close()


async def test_the_tree_streams_in_while_the_bind_runs(
    stored: tuple[OperatorContext, dict[str, Any], Path], tmp_path: Path
) -> None:
    ctx, snapshot, source = stored
    target = tmp_path / "target"
    target.mkdir()
    async with running_runtime(target) as (server, pool_token):
        address = f"127.0.0.1:{server.port}"
        streaming = asyncio.Event()
        bound = asyncio.ensure_future(_bind(address, pool_token, streaming))
        pending = PendingBind(pool_token, streaming, bound)

        await restore_snapshot(ctx, SESSION, snapshot, address, SESSION_TOKEN, pending=pending)

        assert bound.done() and bound.exception() is None
        await _check_resumed(address, pool_token, target, source)


async def test_a_restore_that_the_bind_overtook_starts_over_with_the_sessions_token(
    stored: tuple[OperatorContext, dict[str, Any], Path], tmp_path: Path
) -> None:
    ctx, snapshot, source = stored
    target = tmp_path / "target"
    target.mkdir()
    async with running_runtime(target) as (server, pool_token):
        address = f"127.0.0.1:{server.port}"
        await _bind(address, pool_token, None)  # the pool's token is refused from here on
        bound: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        bound.set_result(None)
        pending = PendingBind(pool_token, asyncio.Event(), bound)

        await restore_snapshot(ctx, SESSION, snapshot, address, SESSION_TOKEN, pending=pending)

        await _check_resumed(address, pool_token, target, source)
