"""SandboxCore: the tool interface on one sandbox's runtime client, whatever backend opened it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from sandfleet.clients.runtime.client import (
    CommandResult,
    FileEntry,
    ResetResult,
    RuntimeClient,
    SandboxStats,
    UploadResult,
)
from sandfleet.errors import SandfleetError, SuspendError
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import SandboxPaths
from sandfleet.sandbox.copy_back import CopyLimits, CopyReport, copy_tree
from sandfleet.sandbox.suspension import SuspendedSandbox, Suspender
from sandfleet.sandbox.tree_snapshot import TreeSnapshot
from sandfleet.tool_calls import (
    SUBMITTED_OBSERVATION,
    EditorRequest,
    SubmitRequest,
    ToolCallError,
    observe,
    parse_tool_call,
    run_editor_request,
)

log = get_logger(__name__)

SandboxOpener = Callable[[int], Awaitable[Sequence[Any]]]
"""Opens n more sandboxes like this one (same backend, pool, template, namespace and
caller); all or none. What `fork` uses; set by the ways of opening a Sandbox."""


class SandboxCore:
    """One sandbox: `call_tool` gives the model's view, typed helpers give the program's.

    It knows no backend: it is built from what a backend opened (a client, the paths, a
    close callback), and `sandfleet.Sandbox` adds the ways to open one on top of it.

    Raises SandboxLostError when the runtime agent is gone; never for a mistake the model made.
    """

    def __init__(
        self,
        client: RuntimeClient,
        *,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        on_close: Callable[[], Awaitable[None]] | None = None,
        opener: SandboxOpener | None = None,
        suspender: Suspender | None = None,
    ) -> None:
        self.client = client
        self.paths = paths or SandboxPaths()
        self.tool_timeout_s = tool_timeout_s
        """Timeout for `execute_bash` calls; 0 = the runtime's default (120 s)."""
        self.max_output_chars = max_output_chars
        self._on_close = on_close
        self._opener = opener
        self._suspender = suspender
        self._sessions = {"default"}
        """The bash sessions used, whose cwd and environment a suspend saves."""
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            await self._on_close()
        else:
            await self.client.close()

    # --- the model's view -------------------------------------------------------------------
    async def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run `execute_bash` or `str_replace_editor`; return exactly what the model sees.

        `arguments` is a mapping or the model's JSON text. They are checked as the agent
        loop checks them (`parse_tool_call`), so a bad call gets the same message here as in
        a run, never an exception. `submit` answers as in a run but ends nothing here.
        """
        try:
            request = parse_tool_call(name, arguments)
        except ToolCallError as exc:
            return str(exc)
        if isinstance(request, SubmitRequest):  # ending a run is the agent loop's job
            return SUBMITTED_OBSERVATION
        return await observe(
            self.client,
            request,
            timeout_s=self.tool_timeout_s,
            max_output_chars=self.max_output_chars,
        )

    # --- typed helpers ----------------------------------------------------------------------
    async def bash(
        self, command: str, *, session: str = "default", timeout_s: float | None = None
    ) -> CommandResult:
        self._sessions.add(session)
        return await self.client.run_command(
            command,
            session=session,
            timeout_s=timeout_s or 0,
            max_output_chars=self.max_output_chars,
        )

    async def edit(self, request: EditorRequest) -> str:
        """The editor's output for one request (`ViewRequest(path)`, ...); raises ToolError
        when the editor refuses, with the message the model would see."""
        return await run_editor_request(self.client, request)

    async def upload(
        self, source: Path | bytes, remote: str, *, mode: int | None = None
    ) -> UploadResult:
        return await self.client.upload(source, remote, mode=mode)

    async def download(self, remote: str, local: Path) -> int:
        return await self.client.download(remote, local)

    async def download_tree(self, remote_dir: str, local_dir: Path) -> list[Path]:
        """Copy every regular file below `remote_dir` into `local_dir`, keeping relative paths.

        The copy is `copy_tree`'s with the default limits: whatever it skipped is not listed.
        """
        report = await self.copy_tree(remote_dir, local_dir)
        return [local_dir.joinpath(*name.split("/")) for name in report.files]

    async def copy_tree(
        self, remote_dir: str, local_dir: Path, limits: CopyLimits | None = None
    ) -> CopyReport:
        """Copy the regular files below `remote_dir` into the new folder `local_dir` within
        `limits`; the report names what was skipped and why (see sandfleet.sandbox.copy_back)."""
        return await copy_tree(self.client, remote_dir, local_dir, limits)

    async def list_files(self, remote_dir: str) -> list[FileEntry]:
        return await self.client.list_files(remote_dir)

    async def stats(self) -> SandboxStats:
        return await self.client.stats()

    async def suspend(self) -> SuspendedSandbox:
        """Save this sandbox to disk and stop it; `Sandbox.resume(record.id)` brings it back.

        Saved: the working tree (input and output included), HOME, /tmp and /var/tmp, and
        each bash session's working directory and exported environment. Not kept: running
        processes (foreground commands are interrupted; everything ends when the sandbox
        stops, after the snapshot is written and verified). SnapshotTooLargeError (naming the
        limit and the biggest paths) or SuspendError leave the sandbox running. After a
        suspend this object is closed. Local sandboxes, and cluster ones through the gateway
        (on_cluster, connect_session: the session is kept, Suspended, holding no pod; what
        a cluster snapshot holds is in docs/suspend.md)."""
        if self._closed:
            raise SuspendError("the sandbox is closed: there is nothing to suspend")
        if self._suspender is None:
            raise SuspendError(
                "this sandbox cannot be suspended: local sandboxes (Sandbox.local) and cluster "
                "sandboxes through the gateway (Sandbox.on_cluster, connect_session) can; one "
                "opened with Sandbox.connect or a ClusterBackend cannot (kubectl can: "
                "spec.suspend, docs/suspend.md)"
            )
        record = await self._suspender(sorted(self._sessions))
        self._closed = True  # the backend stopped the sandbox and closed its client
        return record

    # --- rollouts (RL): reset, snapshot, restore, fork --------------------------------------
    async def reset(self) -> ResetResult:
        """Back to the pristine state for the next rollout, in milliseconds: every process
        killed, bash sessions closed, the working tree as the image shipped it (or as the
        last `restore(..., as_baseline=True)` / fork left it), the environment back to the
        binding. The binding stays: the same session, token and tenant, so reusing a
        sandbox through reset never hands it to another caller. ToolError
        (FAILED_PRECONDITION) when the runtime keeps no baseline (a tree over its bound)."""
        return await self.client.reset()

    async def snapshot(self) -> TreeSnapshot:
        """The working tree as it is now, as a tar archive in a private temporary file
        (see TreeSnapshot); close the snapshot when done with it."""
        directory = await asyncio.to_thread(TreeSnapshot.new_directory)
        snapshot = TreeSnapshot(directory, 0)
        try:
            snapshot.size = await self.client.snapshot_to(snapshot.path)
        except BaseException:
            snapshot.close()
            raise
        return snapshot

    async def restore(self, snapshot: TreeSnapshot, *, as_baseline: bool = False) -> int:
        """Replace the working tree with `snapshot`'s; returns the entries unpacked.
        `as_baseline`: later resets return to this tree. An unsafe archive raises ToolError
        and changes nothing."""
        if snapshot.closed:
            raise ValueError("the snapshot is closed")
        entries, _ = await self.client.restore(snapshot.path, as_baseline=as_baseline)
        return entries

    async def fork(self, count: int, *, as_baseline: bool = True) -> list[Self]:
        """`count` new, independent sandboxes holding this one's working tree as it is now
        ("prepare once, fork N"), opened the way this one was (a local backend's config; a
        gateway claim of the same pool or template in the same namespace, as the same
        caller). With `as_baseline` (the default) their `reset()` returns to the fork
        point. Processes and shell state are not copied: each fork starts fresh shells.
        All or none: when one cannot be opened or restored, the others are closed. Close
        each fork when done; this sandbox is unchanged."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        if self._opener is None:
            raise SandfleetError(
                "this sandbox cannot fork: it was not opened from a backend (Sandbox.connect); "
                "open it with Sandbox.local, Sandbox.open or Sandbox.on_cluster"
            )
        with await self.snapshot() as snapshot:
            forks = cast(list[Self], list(await self._opener(count)))
            try:
                await asyncio.gather(
                    *(fork.restore(snapshot, as_baseline=as_baseline) for fork in forks)
                )
            except BaseException:
                await asyncio.shield(close_all(forks))
                raise
        log.info("sandbox_forked", count=count, archive_bytes=snapshot.size)
        return forks


async def close_all(sandboxes: Sequence[SandboxCore]) -> None:
    """Close every sandbox, each failure logged rather than stopping the others."""
    results = await asyncio.gather(*(s.close() for s in sandboxes), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            log.warning("sandbox_close_failed", error=repr(result))
