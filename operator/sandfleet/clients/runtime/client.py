"""RuntimeClient: the async gRPC client of one sandbox's runtime agent.

It is one class over one RuntimeConnection (channel, stubs, metadata): the bash, editor,
file and system calls are here, the rollout calls (reset, snapshots, detached commands) are
RolloutCalls over the same connection, which RuntimeClient delegates to.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import grpc

from sandfleet.clients.grpc_channel import Tls
from sandfleet.clients.runtime.calls import (
    CHUNK,
    DEADLINE_MARGIN_S,
    command_result,
    model_text,
    publish,
    translate,
)
from sandfleet.clients.runtime.connection import (
    RuntimeChannel,
    RuntimeConnection,
    open_runtime_channel,
)
from sandfleet.clients.runtime.results import CommandResult, FileEntry, SandboxStats, UploadResult
from sandfleet.clients.runtime.rollouts import ResetResult, RolloutCalls
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import editor_service_pb2 as editor_pb
from sandfleet_proto.runtime.v1 import file_service_pb2 as file_pb
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb

__all__ = [
    "CommandResult",
    "FileEntry",
    "ResetResult",
    "RuntimeChannel",
    "RuntimeClient",
    "SandboxStats",
    "Tls",
    "UploadResult",
    "open_runtime_channel",
]

_NO_ENV: Mapping[str, str] = MappingProxyType({})


class _EditorResponse(Protocol):
    """Every editor RPC answers with the text the model sees."""

    @property
    def output(self) -> str: ...


class RuntimeClient:
    """One channel to one runtime agent. Model-fixable failures raise ToolError; every
    infrastructure failure (unreachable, auth, deadline, server fault) raises SandboxLostError."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        rpc_timeout_s: float = 60.0,
        session: str | None = None,
        tls: Tls | None = None,
        caller_token: Callable[[], str] | None = None,
        channel: RuntimeChannel | None = None,
    ) -> None:
        """`address` is the runtime itself (host:port, unix:PATH) or, given `session`
        ("namespace/name"), a gateway that proxies every call to that session's sandbox;
        `tls` makes the channel TLS (a gateway behind a certificate). Through a gateway,
        `caller_token` gives the caller's Kubernetes token, which every call carries too
        (read again every minute: it may rotate). `channel`: an open one that others share
        (open_runtime_channel; close() leaves it open), instead of one of the client's own."""
        self.address = address
        self.session = session
        self._connection = RuntimeConnection(
            address, token, rpc_timeout_s=rpc_timeout_s, session=session, tls=tls,
            caller_token=caller_token, channel=channel,
        )  # fmt: skip
        self._rollouts = RolloutCalls(self._connection)

    def rotate_token(self, token: str) -> None:
        self._connection.rotate_token(token)

    async def close(self) -> None:
        await self._connection.close()

    def detach_channel(self) -> RuntimeChannel:
        """The open channel, now the caller's to close (a gateway hands the channel it
        warmed for a claim to its proxy); this client must not be used any more."""
        return self._connection.detach_channel()

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until the agent accepts authenticated calls (stats answers)."""
        await self._connection.rpc(
            lambda: self._connection.system.GetStats(
                system_pb.GetStatsRequest(),
                metadata=self._connection.metadata,
                timeout=timeout_s,
                wait_for_ready=True,
            )
        )

    # --- bash -------------------------------------------------------------------------------
    async def run_command(
        self,
        command: str,
        *,
        session: str = "default",
        timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> CommandResult:
        with model_text():
            request = bash_pb.RunCommandRequest(
                session=session,
                command=command,
                timeout_seconds=timeout_s,
                max_output_chars=max_output_chars,
            )
        return await self._connection.run_command(request)

    async def stream_command(
        self, command: str, *, session: str = "default", timeout_s: float = 0
    ) -> AsyncIterator[tuple[str, str] | CommandResult]:
        """Yield ("stdout"|"stderr", text) chunks as they arrive, then the CommandResult."""
        with model_text():
            request = bash_pb.StreamCommandRequest(
                session=session, command=command, timeout_seconds=timeout_s
            )
        deadline = (timeout_s or 3600.0) + DEADLINE_MARGIN_S
        call = self._connection.bash.StreamCommand(
            request, metadata=self._connection.metadata, timeout=deadline
        )
        try:
            async for message in call:
                if message.HasField("chunk"):
                    name = (
                        "stderr"
                        if message.chunk.stream == bash_pb.OUTPUT_STREAM_STDERR
                        else "stdout"
                    )
                    yield name, message.chunk.text
                else:
                    yield command_result(message.result)
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc

    async def interrupt(self, session: str = "default") -> bool:
        resp = await self._connection.rpc(
            lambda: self._connection.bash.InterruptCommand(
                bash_pb.InterruptCommandRequest(session=session),
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        return resp.interrupted

    # --- editor -----------------------------------------------------------------------------
    async def view(self, path: str, view_range: Sequence[int] | None = None) -> str:
        """A file with line numbers (only `view_range`: [start, end], 1-based, end -1 = to
        the end of the file) or a directory listing two levels deep."""
        with model_text():
            request = editor_pb.ViewRequest(path=path, view_range=view_range or [])
        return await self._edit(self._connection.editor.View, request)

    async def create(self, path: str, file_text: str) -> str:
        with model_text():
            request = editor_pb.CreateRequest(path=path, file_text=file_text)
        return await self._edit(self._connection.editor.Create, request)

    async def str_replace(self, path: str, old_str: str, new_str: str | None = None) -> str:
        """Replace the one occurrence of `old_str` in `path`; `new_str` None deletes it."""
        with model_text():
            request = editor_pb.StrReplaceRequest(path=path, old_str=old_str, new_str=new_str)
        return await self._edit(self._connection.editor.StrReplace, request)

    async def insert(self, path: str, insert_line: int, new_str: str) -> str:
        """Insert `new_str` after line `insert_line` (0 = at the top)."""
        with model_text():
            request = editor_pb.InsertRequest(path=path, insert_line=insert_line, new_str=new_str)
        return await self._edit(self._connection.editor.Insert, request)

    async def undo_edit(self, path: str) -> str:
        with model_text():
            request = editor_pb.UndoEditRequest(path=path)
        return await self._edit(self._connection.editor.UndoEdit, request)

    async def _edit(self, rpc: Callable[..., Awaitable[_EditorResponse]], request: Any) -> str:
        response = await self._connection.rpc(
            lambda: rpc(
                request, metadata=self._connection.metadata, timeout=self._connection.rpc_timeout_s
            )
        )
        return response.output

    # --- files ------------------------------------------------------------------------------
    async def upload(
        self,
        source: Path | bytes,
        remote: str,
        *,
        mode: int | None = None,
        make_parents: bool = True,
        overwrite: bool = True,
    ) -> UploadResult:
        """Stream a local file (or bytes) to `remote`; keeps the local mode bits by default."""
        if mode is None:
            mode = 0o644
            if isinstance(source, Path):
                mode = (await asyncio.to_thread(source.stat)).st_mode & 0o7777
        with model_text():
            header = file_pb.UploadFileHeader(
                path=remote, mode=mode, make_parents=make_parents, overwrite=overwrite
            )

        async def requests() -> AsyncIterator[file_pb.UploadFileRequest]:
            yield file_pb.UploadFileRequest(header=header)
            if isinstance(source, bytes):
                for start in range(0, len(source), CHUNK):
                    yield file_pb.UploadFileRequest(chunk=source[start : start + CHUNK])
                return
            # Local disk reads go through a worker thread: a slow disk must not stall the loop.
            handle = await asyncio.to_thread(source.open, "rb")
            try:
                while chunk := await asyncio.to_thread(handle.read, CHUNK):
                    yield file_pb.UploadFileRequest(chunk=chunk)
            finally:
                handle.close()

        resp = await self._connection.rpc(
            lambda: self._connection.files.UploadFile(
                requests(), metadata=self._connection.metadata
            )
        )
        return UploadResult(path=resp.path, size=resp.size, sha256=resp.sha256)

    async def download(self, remote: str, local: Path) -> int:
        """Stream `remote` into `local` (a temporary name, then renamed); returns bytes written."""
        await asyncio.to_thread(local.parent.mkdir, parents=True, exist_ok=True)
        partial = local.with_name(local.name + ".partial")
        with model_text():
            request = file_pb.DownloadFileRequest(path=remote, chunk_size=CHUNK)
        call = self._connection.files.DownloadFile(request, metadata=self._connection.metadata)
        written, mode = 0, 0o644
        out = await asyncio.to_thread(partial.open, "wb")
        try:
            async for message in call:
                if message.HasField("header"):
                    mode = message.header.mode or mode
                    continue
                await asyncio.to_thread(out.write, message.chunk)
                written += len(message.chunk)
        except grpc.aio.AioRpcError as exc:
            out.close()
            partial.unlink(missing_ok=True)
            raise translate(exc) from exc
        out.close()
        await asyncio.to_thread(publish, partial, local, mode)
        return written

    async def download_chunks(self, remote: str) -> AsyncGenerator[bytes, None]:
        """The bytes of `remote` as the runtime streams them, nothing written anywhere.

        Closing the iterator early (`contextlib.aclosing`) cancels the transfer, so a caller
        with a byte budget stops a file that is bigger than the runtime said.
        """
        call = self._connection.files.DownloadFile(
            file_pb.DownloadFileRequest(path=remote, chunk_size=CHUNK),
            metadata=self._connection.metadata,
        )
        try:
            async for message in call:
                if message.HasField("chunk"):
                    yield message.chunk
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc
        finally:
            call.cancel()  # a no-op once the stream has ended

    async def list_tree(
        self, remote_dir: str, *, max_depth: int = 0
    ) -> tuple[list[FileEntry], bool]:
        """What is below `remote_dir` (0: every level) and whether the runtime cut the
        listing short. Symlinks are listed as themselves (never as directories)."""
        resp = await self._connection.rpc(
            lambda: self._connection.files.ListFiles(
                file_pb.ListFilesRequest(path=remote_dir, max_depth=max_depth),
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        entries = [FileEntry(e.path, e.is_dir, e.size, e.mode) for e in resp.entries]
        return entries, resp.truncated

    async def list_files(self, remote_dir: str, *, max_depth: int = 0) -> list[FileEntry]:
        with model_text():
            request = file_pb.ListFilesRequest(path=remote_dir, max_depth=max_depth)
        resp = await self._connection.rpc(
            lambda: self._connection.files.ListFiles(
                request,
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        return [FileEntry(e.path, e.is_dir, e.size, e.mode) for e in resp.entries]

    # --- system -----------------------------------------------------------------------------
    async def stats(self) -> SandboxStats:
        resp = await self._connection.rpc(
            lambda: self._connection.system.GetStats(
                system_pb.GetStatsRequest(),
                metadata=self._connection.metadata,
                timeout=self._connection.rpc_timeout_s,
            )
        )
        source = {
            system_pb.MEMORY_SOURCE_CGROUP: "cgroup",
            system_pb.MEMORY_SOURCE_PROC: "proc",
        }.get(resp.memory_source, "unknown")
        return SandboxStats(
            memory_current_bytes=resp.memory_current_bytes,
            memory_peak_bytes=resp.memory_peak_bytes,
            memory_source=source,
            process_count=resp.process_count,
            uptime_s=resp.uptime_seconds,
            last_activity_unix=resp.last_activity_unix,
            idle_s=resp.idle_seconds,
            bash_sessions=resp.bash_sessions,
            running_commands=resp.running_commands,
            session=resp.session,
            bash_session_names=tuple(resp.bash_session_names),
        )

    async def bind_session(
        self, token: str, env: Mapping[str, str] = _NO_ENV, session: str = ""
    ) -> None:
        """Hand the (warm) sandbox to a session: `token` replaces the current one on the
        server and in this client, `env` reaches every bash session started afterwards,
        open bash sessions are closed and the idle clock restarts.

        `session` ("namespace/name") is for the runtime's logs and stats. A short token or
        an invalid variable name raises ToolError and changes nothing. When the call fails
        otherwise (SandboxLostError), the server may or may not have switched tokens.
        """
        with model_text():
            request = system_pb.BindSessionRequest(token=token, env=env, session=session)
        await self._connection.rpc(
            lambda: self._connection.system.BindSession(
                request, metadata=self._connection.metadata, timeout=self._connection.rpc_timeout_s
            )
        )
        self.rotate_token(token)

    # --- rollouts (RolloutCalls over the same connection) -----------------------------------
    async def reset(self) -> ResetResult:
        """RolloutCalls.reset: the sandbox back to its pristine state for the next rollout."""
        return await self._rollouts.reset()

    async def capture_baseline(self) -> tuple[int, int]:
        """RolloutCalls.capture_baseline: the tree as it is now becomes reset's target."""
        return await self._rollouts.capture_baseline()

    def snapshot(self) -> AsyncGenerator[bytes, None]:
        """RolloutCalls.snapshot: the working tree as tar chunks."""
        return self._rollouts.snapshot()

    async def snapshot_to(self, local: Path) -> int:
        """RolloutCalls.snapshot_to: the working tree's tar archive written to `local`."""
        return await self._rollouts.snapshot_to(local)

    async def snapshot_with_roots(
        self, extra_roots: Sequence[str]
    ) -> tuple[tuple[str, ...], AsyncGenerator[bytes, None]]:
        """RolloutCalls.snapshot_with_roots: the working tree and extra roots (HOME, /tmp)."""
        return await self._rollouts.snapshot_with_roots(extra_roots)

    async def restore(
        self,
        archive: Path | AsyncIterator[bytes],
        *,
        as_baseline: bool = False,
        extra_roots: Sequence[str] = (),
    ) -> tuple[int, int]:
        """RolloutCalls.restore: the working tree (and `extra_roots`) replaced by a tar archive."""
        return await self._rollouts.restore(
            archive, as_baseline=as_baseline, extra_roots=extra_roots
        )

    async def run_detached(
        self,
        command: str,
        *,
        command_id: str,
        session: str = "default",
        timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> CommandResult:
        """RolloutCalls.run_detached: a command that survives a dropped call."""
        return await self._rollouts.run_detached(
            command, command_id=command_id, session=session, timeout_s=timeout_s,
            max_output_chars=max_output_chars,
        )  # fmt: skip

    async def attach_command(self, command_id: str, *, timeout_s: float = 3600.0) -> CommandResult:
        """RolloutCalls.attach_command: the result of a detached command, once."""
        return await self._rollouts.attach_command(command_id, timeout_s=timeout_s)
