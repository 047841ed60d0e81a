"""Rollout calls of a runtime client (RL): reset, baseline, snapshot/restore of the working
tree, detached commands that survive a dropped call. RuntimeClient holds one RolloutCalls over
its connection and delegates to it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from sandfleet.clients.runtime.calls import (
    CHUNK,
    DEADLINE_MARGIN_S,
    command_result,
    model_text,
    publish,
    translate,
)
from sandfleet.clients.runtime.results import CommandResult
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import file_service_pb2 as file_pb
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb

if TYPE_CHECKING:
    from sandfleet.clients.runtime.connection import RuntimeConnection


@dataclasses.dataclass(frozen=True, slots=True)
class ResetResult:
    """What RuntimeClient.reset() did."""

    closed_sessions: int
    killed_processes: int
    removed_paths: int
    restored_paths: int
    dropped_commands: int
    duration_s: float


class RolloutCalls:
    """The rollout RPCs over one RuntimeConnection."""

    def __init__(self, connection: RuntimeConnection) -> None:
        self._connection = connection

    async def reset(self) -> ResetResult:
        """Return the sandbox to its pristine state for the next rollout of the same session:
        bash sessions closed, every process killed, the working tree restored, editor undo
        history and detached commands dropped. The token and the binding stay. ToolError
        (FAILED_PRECONDITION) when the runtime keeps no baseline (its tree was too large)."""
        resp = await self._connection.rpc(
            lambda: self._connection.system.Reset(
                system_pb.ResetRequest(),
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        return ResetResult(
            closed_sessions=resp.closed_sessions,
            killed_processes=resp.killed_processes,
            removed_paths=resp.removed_paths,
            restored_paths=resp.restored_paths,
            dropped_commands=resp.dropped_commands,
            duration_s=resp.duration_seconds,
        )

    async def capture_baseline(self) -> tuple[int, int]:
        """Make the working tree as it is now the one `reset()` returns to (e.g. after
        uploading a task's files); returns (paths, bytes) kept. A later bind_session goes
        back to the image's tree. ToolError (FAILED_PRECONDITION) when the tree is too large."""
        resp = await self._connection.rpc(
            lambda: self._connection.system.CaptureBaseline(
                system_pb.CaptureBaselineRequest(),
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        return resp.paths, resp.bytes

    async def snapshot(self) -> AsyncGenerator[bytes, None]:
        """The working tree as a tar archive, chunk by chunk (closing early cancels it)."""
        _, chunks = await self.snapshot_with_roots(())
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    async def snapshot_with_roots(
        self, extra_roots: Sequence[str]
    ) -> tuple[tuple[str, ...], AsyncGenerator[bytes, None]]:
        """The working tree and the `extra_roots` that exist and are writable ("~": the
        home directory; their members named absolutely) as one tar archive: (the extra roots
        it holds, as the runtime resolved them, its chunks). Close the chunks when done. A
        runtime that predates extra roots archives the working tree only, and says so (())."""
        request = file_pb.SnapshotTreeRequest(extra_roots=list(extra_roots))
        call = self._connection.files.SnapshotTree(request, metadata=self._connection.metadata)
        try:
            first = await anext(aiter(call), None)
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            raise translate(exc) from exc
        roots = tuple(first.extra_roots) if first is not None else ()

        async def chunks() -> AsyncGenerator[bytes, None]:
            try:
                if first is None:
                    return
                yield first.chunk
                async for message in call:
                    yield message.chunk
            except grpc.aio.AioRpcError as exc:
                raise translate(exc) from exc
            finally:
                call.cancel()  # a no-op once the stream has ended

        return roots, chunks()

    async def snapshot_to(self, local: Path) -> int:
        """Write the working tree's tar archive to `local` (renamed into place when
        complete); returns its size in bytes."""
        await asyncio.to_thread(local.parent.mkdir, parents=True, exist_ok=True)
        partial = local.with_name(local.name + ".partial")
        written = 0
        out = await asyncio.to_thread(partial.open, "wb")
        try:
            async for chunk in self.snapshot():
                await asyncio.to_thread(out.write, chunk)
                written += len(chunk)
        except BaseException:
            out.close()
            partial.unlink(missing_ok=True)
            raise
        out.close()
        await asyncio.to_thread(publish, partial, local, 0o600)
        return written

    async def restore(
        self,
        archive: Path | AsyncIterator[bytes],
        *,
        as_baseline: bool = False,
        extra_roots: Sequence[str] = (),
    ) -> tuple[int, int]:
        """Replace the working tree with a tar archive (a local file or chunks, e.g. another
        sandbox's `snapshot()`); returns (entries, bytes) unpacked. An unsafe archive
        (absolute or '..' paths, links out of the tree, devices) raises ToolError and changes
        nothing. `as_baseline`: later resets return to this tree instead of the image's.
        `extra_roots`: what `snapshot_with_roots` said the archive holds; each is replaced
        too, and absolute members under them are allowed."""
        header = file_pb.RestoreTreeHeader(as_baseline=as_baseline, extra_roots=extra_roots)

        async def requests() -> AsyncIterator[file_pb.RestoreTreeRequest]:
            yield file_pb.RestoreTreeRequest(header=header)
            if isinstance(archive, Path):
                handle = await asyncio.to_thread(archive.open, "rb")
                try:
                    while chunk := await asyncio.to_thread(handle.read, CHUNK):
                        yield file_pb.RestoreTreeRequest(chunk=chunk)
                finally:
                    handle.close()
                return
            async for chunk in archive:
                yield file_pb.RestoreTreeRequest(chunk=chunk)

        resp = await self._connection.rpc(
            lambda: self._connection.files.RestoreTree(
                requests(), metadata=self._connection.metadata
            )
        )
        return resp.entries, resp.bytes

    async def run_detached(
        self,
        command: str,
        *,
        command_id: str,
        session: str = "default",
        timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> CommandResult:
        """`run_command` under a caller-chosen id: if this call drops (SandboxLostError, or
        CancelledError when the channel is closed), the command keeps running and
        `attach_command(command_id)` gets its result, once. NOT_FOUND from that attach means
        the command never reached the runtime: run it again. ToolError (ALREADY_EXISTS)
        while a command with that id is running or uncollected."""
        with model_text():
            request = bash_pb.RunCommandRequest(
                session=session,
                command=command,
                timeout_seconds=timeout_s,
                max_output_chars=max_output_chars,
                command_id=command_id,
            )
        return await self._connection.run_command(request)

    async def attach_command(self, command_id: str, *, timeout_s: float = 3600.0) -> CommandResult:
        """Wait for the command started by `run_detached(command_id=...)` and return its
        result; ToolError (NOT_FOUND) when unknown or already collected."""
        resp = await self._connection.rpc(
            lambda: self._connection.bash.AttachCommand(
                bash_pb.AttachCommandRequest(command_id=command_id),
                metadata=self._connection.metadata,
                timeout=timeout_s + DEADLINE_MARGIN_S,
            )
        )
        return command_result(resp)
