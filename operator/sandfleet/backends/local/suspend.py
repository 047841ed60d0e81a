"""Suspend a local sandbox to disk and resume it (docs/suspend.md).

Suspend, in an order that never loses data: check the size (refuse over the limit),
interrupt each bash session's foreground command and read its cwd and exported
environment, write the archive and re-read it for its checksum, write the manifest, and
only then stop the sandbox (its processes end). Any failure before the manifest leaves the
sandbox running and removes the partial snapshot. Resume verifies the snapshot, starts a
sandbox with the same id and config, unpacks the files, re-establishes the sessions, and
only then removes the snapshot; a failure stops the new sandbox and keeps the snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sandfleet.backends.local.config import LocalSandboxConfig
from sandfleet.backends.local.launcher import LocalRuntime, launch_local_runtime
from sandfleet.backends.local.registry import Registry
from sandfleet.backends.local.snapshot_store import (
    Manifest,
    check_size,
    extract_archive,
    new_snapshot_folder,
    read_verified,
    remove_snapshot,
    save_snapshot,
    saved_entries,
    snapshot_dir,
)
from sandfleet.backends.local.spawning import give_to
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxStartError
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import OpenedSandbox, SandboxPaths
from sandfleet.sandbox.suspension import SuspendedSandbox
from sandfleet.snapshots.shell_state import capture, live_sessions, reestablish

log = get_logger(__name__)

CONFIG_FIELDS = (
    "isolation", "egress", "max_processes", "max_memory_bytes", "namespace_tool",
    "max_suspend_bytes", "log_level",
)  # fmt: skip
"""LocalSandboxConfig fields a resume starts with (plus paths and env; not host binds)."""


def opened_local(
    runtime: LocalRuntime, client: RuntimeClient, config: LocalSandboxConfig
) -> OpenedSandbox[LocalRuntime]:
    """The OpenedSandbox of a running local sandbox: closing stops it, suspending saves
    it first."""

    async def close() -> None:
        try:
            await client.close()
        finally:
            await runtime.close()

    async def suspend(sessions: Sequence[str]) -> SuspendedSandbox:
        return await suspend_local(runtime, client, config, sessions, close)

    return OpenedSandbox(
        client=client, paths=runtime.paths, close=close, details=runtime, suspend=suspend
    )


async def suspend_local(
    runtime: LocalRuntime,
    client: RuntimeClient,
    config: LocalSandboxConfig,
    sessions: Sequence[str],
    stop: Callable[[], Awaitable[None]],
) -> SuspendedSandbox:
    """Save `runtime`'s sandbox to <state_dir>/suspended/<id>/, then `stop()` it."""
    started = time.perf_counter()
    state_dir = config.resolved_state_dir().absolute()
    folder = new_snapshot_folder(state_dir, runtime.sandbox_id)
    await asyncio.to_thread(check_size, runtime.host_root, config.max_suspend_bytes)
    states = await capture(client, await live_sessions(client, sessions))

    def describe(size: int, digest: str) -> Manifest:
        return Manifest(
            sandbox_id=runtime.sandbox_id, suspended_at=time.time(), size_bytes=size,
            sha256=digest, saved_paths=_saved_paths(runtime), sessions=states,
            host_root=str(runtime.host_root), config=_config_fields(config, runtime.paths),
        )  # fmt: skip

    try:
        manifest = await asyncio.to_thread(save_snapshot, folder, runtime.host_root, describe)
    except asyncio.CancelledError:
        # A cancelled suspend leaves no snapshot: the sandbox was never stopped.
        await asyncio.to_thread(remove_snapshot, folder)
        raise
    await stop()
    log.info(
        "sandbox_suspended", sandbox=runtime.sandbox_id, bytes=manifest.size_bytes,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )  # fmt: skip
    return suspended_record(folder, manifest)


async def resume_local(
    sandbox_id: str, state_dir: Path | None = None, config: LocalSandboxConfig | None = None
) -> tuple[OpenedSandbox[LocalRuntime], LocalSandboxConfig]:
    """Start the suspended sandbox `sandbox_id` again, its files and sessions restored;
    returns it with the config it was started with.

    SnapshotCorruptError (naming the file) when its snapshot is missing or damaged: nothing
    is removed. `config`: start it with this one instead of the config it had."""
    started = time.perf_counter()
    root = (state_dir or (config or LocalSandboxConfig()).resolved_state_dir()).absolute()
    folder = snapshot_dir(root, sandbox_id)
    manifest = await asyncio.to_thread(read_verified, folder)
    with _resuming(folder, sandbox_id):
        if Registry(root).record_path(sandbox_id).exists():
            raise SandboxStartError(f"sandbox {sandbox_id} is running: it cannot be resumed twice")
        opened, config = await _start_resumed(
            folder, manifest, config or config_from_manifest(manifest, root)
        )
    log.info(
        "sandbox_resumed", sandbox=sandbox_id, bytes=manifest.size_bytes,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )  # fmt: skip
    return opened, config


async def _start_resumed(
    folder: Path, manifest: Manifest, config: LocalSandboxConfig
) -> tuple[OpenedSandbox[LocalRuntime], LocalSandboxConfig]:
    """Start the sandbox, unpack, re-establish the sessions, then remove the snapshot."""
    sandbox_id = manifest.sandbox_id
    runtime = await launch_local_runtime(config, sandbox_id=sandbox_id)
    try:
        client = RuntimeClient(runtime.address, runtime.token)
    except BaseException:
        await runtime.close()
        raise
    opened = opened_local(runtime, client, config)
    try:
        await asyncio.to_thread(_unpack, folder, runtime.host_root)
        moved = (manifest.host_root, str(runtime.host_root))
        await reestablish(client, manifest.sessions, moved)
    except BaseException:
        await asyncio.shield(opened.close())
        raise
    await asyncio.to_thread(remove_snapshot, folder)
    return opened, config


@contextlib.contextmanager
def _resuming(folder: Path, sandbox_id: str) -> Iterator[None]:
    """One resume at a time per snapshot: an flock on <folder>/.resuming (released by the
    kernel if this process dies, so a crash never blocks the next resume)."""
    try:
        fd = os.open(folder / ".resuming", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:  # another program resumed it (and removed the snapshot)
        raise SandboxStartError(f"sandbox {sandbox_id} was resumed by another program") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SandboxStartError(
                f"sandbox {sandbox_id} is being resumed by another program"
            ) from None
        yield
    finally:
        os.close(fd)


def suspended_record(folder: Path, manifest: Manifest) -> SuspendedSandbox:
    return SuspendedSandbox(
        id=manifest.sandbox_id, size_bytes=manifest.size_bytes, sha256=manifest.sha256,
        suspended_at=manifest.suspended_at, path=folder, sessions=tuple(manifest.sessions),
        saved_paths=manifest.saved_paths,
    )  # fmt: skip


def config_from_manifest(manifest: Manifest, state_dir: Path) -> LocalSandboxConfig:
    raw = manifest.config
    fields = {name: raw[name] for name in CONFIG_FIELDS if name in raw}
    return LocalSandboxConfig(
        paths=SandboxPaths(**raw["paths"]), env=dict(raw.get("env", {})), state_dir=state_dir,
        **fields,
    )  # fmt: skip


def _config_fields(config: LocalSandboxConfig, paths: SandboxPaths) -> dict[str, Any]:
    fields: dict[str, Any] = {name: getattr(config, name) for name in CONFIG_FIELDS}
    fields["paths"] = dataclasses.asdict(config.paths)
    fields["env"] = dict(config.env)
    return fields


def _saved_paths(runtime: LocalRuntime) -> tuple[str, ...]:
    return tuple(f"/{name}" for name in saved_entries(runtime.host_root))


def _unpack(folder: Path, host_root: Path) -> None:
    extract_archive(folder, host_root)
    owner = host_root.stat().st_uid
    if os.geteuid() == 0 and owner != 0:  # a per-sandbox host uid: the new one owns it all
        give_to(host_root, owner)
