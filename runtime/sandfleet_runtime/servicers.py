"""gRPC servicers: protobuf <-> domain calls, domain errors -> status codes, nothing else."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from sandfleet_proto.runtime.v1 import (
    bash_service_pb2 as bash_pb,
)
from sandfleet_proto.runtime.v1 import (
    bash_service_pb2_grpc as bash_grpc,
)
from sandfleet_proto.runtime.v1 import (
    editor_service_pb2 as editor_pb,
)
from sandfleet_proto.runtime.v1 import (
    editor_service_pb2_grpc as editor_grpc,
)
from sandfleet_proto.runtime.v1 import (
    file_service_pb2 as file_pb,
)
from sandfleet_proto.runtime.v1 import (
    file_service_pb2_grpc as file_grpc,
)
from sandfleet_proto.runtime.v1 import (
    system_service_pb2 as system_pb,
)
from sandfleet_proto.runtime.v1 import (
    system_service_pb2_grpc as system_grpc,
)

from . import files, tree_archive
from .auth import TokenAuthInterceptor
from .bash.detached import DetachedCommands
from .bash.sessions import BashSessions, CommandResult, Outcome, OutputStream
from .binding import SessionBinder
from .editor.file_editor import FileEditor
from .errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    RuntimeToolError,
    tool_error_from,
)
from .reset import Resetter
from .settings import DEFAULT_MAX_UPLOAD_BYTES
from .stats import ActivityClock, collect_stats
from .streaming import ChunkStream
from .tree_roots import resolve_extra_roots

log = logging.getLogger(__name__)
T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]

_OUTCOMES = {
    Outcome.EXITED: bash_pb.COMMAND_OUTCOME_EXITED,
    Outcome.TIMED_OUT: bash_pb.COMMAND_OUTCOME_TIMED_OUT,
    Outcome.INTERRUPTED: bash_pb.COMMAND_OUTCOME_INTERRUPTED,
    Outcome.SHELL_EXITED: bash_pb.COMMAND_OUTCOME_SHELL_EXITED,
}
_STREAMS = {
    OutputStream.STDOUT: bash_pb.OUTPUT_STREAM_STDOUT,
    OutputStream.STDERR: bash_pb.OUTPUT_STREAM_STDERR,
}
_MEMORY_SOURCES = {
    "cgroup": system_pb.MEMORY_SOURCE_CGROUP,
    "proc": system_pb.MEMORY_SOURCE_PROC,
}


async def _abort(context: Context, exc: RuntimeToolError) -> NoReturn:
    await context.abort(exc.status, str(exc))
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


def _domain_error(exc: RuntimeToolError | ValueError | OSError) -> RuntimeToolError:
    """The domain error for what a tool raised; ValueError/OSError from bad arguments too."""
    if isinstance(exc, RuntimeToolError):
        return exc
    mapped = tool_error_from(exc)
    log.info(
        "request_error",
        extra={
            "error": type(exc).__name__,
            "errno": getattr(exc, "errno", None),
            "status": mapped.status.name,
        },
    )
    return mapped


async def _call(context: Context, work: Callable[[], Awaitable[T]]) -> T:
    """Run domain work, translating its errors into status codes with the same message."""
    try:
        return await work()
    except (RuntimeToolError, ValueError, OSError) as exc:
        await _abort(context, _domain_error(exc))


REFUSED_UPLOAD_DRAIN_BYTES = 256 * 1024 * 1024
REFUSED_UPLOAD_DRAIN_S = 10.0


async def _drain(messages: AsyncIterator[file_pb.UploadFileRequest]) -> None:
    """Read and drop what a refused upload's caller still sends, up to a bound.

    The refusal is already decided and the partial file removed; this only lets the caller
    finish writing, so that it receives our status. gRPC's client reports a stream the server
    ends under its writes as INTERNAL "Internal error from Core" about one time in four,
    which would hide the message naming the limit. A caller that sends more than the bound,
    or for longer, is cut off all the same.
    """
    dropped = 0
    # Whatever ends the caller's stream (a timeout, a cancellation on its side), the
    # refusal stands: it is raised by our caller.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(REFUSED_UPLOAD_DRAIN_S):
            async for message in messages:
                dropped += len(message.chunk)
                if dropped > REFUSED_UPLOAD_DRAIN_BYTES:
                    return


def command_response(result: CommandResult) -> bash_pb.RunCommandResponse:
    return bash_pb.RunCommandResponse(
        stdout=result.stdout,
        stderr=result.stderr,
        exit_code=result.exit_code,
        outcome=_OUTCOMES[result.outcome],
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
        stdout_total_bytes=result.stdout_total_bytes,
        stderr_total_bytes=result.stderr_total_bytes,
        duration_seconds=result.duration_s,
        cwd=result.cwd,
    )


class BashServicer(bash_grpc.BashServiceServicer):
    def __init__(self, sessions: BashSessions, detached: DetachedCommands) -> None:
        self._sessions = sessions
        self._detached = detached

    async def RunCommand(
        self, request: bash_pb.RunCommandRequest, context: Context
    ) -> bash_pb.RunCommandResponse:
        def run() -> Awaitable[CommandResult]:
            return self._sessions.run(
                request.session,
                request.command,
                timeout_s=request.timeout_seconds,
                max_output_chars=request.max_output_chars,
            )

        if request.command_id:
            # Detached: a dropped call leaves the command running for AttachCommand.
            result = await _call(context, lambda: self._detached.run(request.command_id, run))
        else:
            # Without an id a dropped call cancels this handler, which stops the command.
            result = await _call(context, run)
        return command_response(result)

    async def AttachCommand(
        self, request: bash_pb.AttachCommandRequest, context: Context
    ) -> bash_pb.RunCommandResponse:
        result = await _call(context, lambda: self._detached.attach(request.command_id))
        return command_response(result)

    async def StreamCommand(
        self, request: bash_pb.StreamCommandRequest, context: Context
    ) -> AsyncIterator[bash_pb.StreamCommandResponse]:
        chunks = ChunkStream(self._sessions.output_cap(request.max_output_chars))
        run = asyncio.ensure_future(
            self._sessions.run(
                request.session,
                request.command,
                timeout_s=request.timeout_seconds,
                max_output_chars=request.max_output_chars,
                listener=chunks.put,
            )
        )
        try:
            # Each yield waits for gRPC flow control: a client that does not read stops the
            # queue from draining, which pauses the pipe reader (see streaming.py).
            async for stream, text in chunks.until(run):
                chunk = bash_pb.OutputChunk(stream=_STREAMS[stream], text=text)
                yield bash_pb.StreamCommandResponse(chunk=chunk)
            try:
                result = run.result()
            except (RuntimeToolError, ValueError, OSError) as exc:
                await _abort(context, _domain_error(exc))
            yield bash_pb.StreamCommandResponse(result=command_response(result))
        finally:
            chunks.close()
            if not run.done():  # the client went away: stop the command it started
                await self._sessions.interrupt(request.session)
                run.cancel()

    async def InterruptCommand(
        self, request: bash_pb.InterruptCommandRequest, context: Context
    ) -> bash_pb.InterruptCommandResponse:
        interrupted = await _call(context, lambda: self._sessions.interrupt(request.session))
        return bash_pb.InterruptCommandResponse(interrupted=interrupted)

    async def RestartSession(
        self, request: bash_pb.RestartSessionRequest, context: Context
    ) -> bash_pb.RestartSessionResponse:
        await _call(context, lambda: self._sessions.restart(request.session))
        return bash_pb.RestartSessionResponse()

    async def CloseSession(
        self, request: bash_pb.CloseSessionRequest, context: Context
    ) -> bash_pb.CloseSessionResponse:
        await _call(context, lambda: self._sessions.close(request.session))
        return bash_pb.CloseSessionResponse()


class EditorServicer(editor_grpc.EditorServiceServicer):
    """Editor calls run on one worker thread: a 50 MB file takes ~1 s to rewrite, which must
    not stall other sessions' RPCs, and one thread keeps the (non-thread-safe) editor serial."""

    def __init__(self, editor: FileEditor, activity: ActivityClock) -> None:
        self._editor = editor
        self._activity = activity
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None

    async def _edit(self, context: Context, work: Callable[[], str]) -> str:
        self._activity.touch()
        if self._worker is None:  # created on first use: an idle sandbox keeps no extra thread
            self._worker = concurrent.futures.ThreadPoolExecutor(1, "editor")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, work)
        except (RuntimeToolError, ValueError, OSError) as exc:
            await _abort(context, _domain_error(exc))

    async def clear_history(self) -> None:
        """Forgets the undo history, on the editor's thread (never during an edit)."""
        if self._worker is None:
            self._editor.clear_history()
            return
        await asyncio.get_running_loop().run_in_executor(self._worker, self._editor.clear_history)

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)

    async def View(
        self, request: editor_pb.ViewRequest, context: Context
    ) -> editor_pb.ViewResponse:
        view_range = list(request.view_range) or None
        output = await self._edit(context, lambda: self._editor.view(request.path, view_range))
        return editor_pb.ViewResponse(output=output)

    async def Create(
        self, request: editor_pb.CreateRequest, context: Context
    ) -> editor_pb.CreateResponse:
        output = await self._edit(
            context, lambda: self._editor.create(request.path, request.file_text)
        )
        return editor_pb.CreateResponse(output=output)

    async def StrReplace(
        self, request: editor_pb.StrReplaceRequest, context: Context
    ) -> editor_pb.StrReplaceResponse:
        new_str = request.new_str if request.HasField("new_str") else None
        output = await self._edit(
            context, lambda: self._editor.str_replace(request.path, request.old_str, new_str)
        )
        return editor_pb.StrReplaceResponse(output=output)

    async def Insert(
        self, request: editor_pb.InsertRequest, context: Context
    ) -> editor_pb.InsertResponse:
        output = await self._edit(
            context,
            lambda: self._editor.insert(request.path, request.insert_line, request.new_str),
        )
        return editor_pb.InsertResponse(output=output)

    async def UndoEdit(
        self, request: editor_pb.UndoEditRequest, context: Context
    ) -> editor_pb.UndoEditResponse:
        output = await self._edit(context, lambda: self._editor.undo_edit(request.path))
        return editor_pb.UndoEditResponse(output=output)


_NO_TREE = FailedPreconditionError("This server has no working tree to snapshot or restore.")


class FileServicer(file_grpc.FileServiceServicer):
    def __init__(
        self,
        activity: ActivityClock,
        *,
        workdir: Path | None = None,
        resetter: Resetter | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        home: str = "",
        own_paths: Callable[[], Collection[Path]] = tuple,
    ) -> None:
        """`workdir` and `resetter` serve SnapshotTree/RestoreTree (FAILED_PRECONDITION
        without them, e.g. in a file-transfer-only server); `home` is the extra root "~",
        `own_paths` the runtime's own paths that no snapshot or restore touches."""
        self._activity = activity
        self._workdir = workdir
        self._resetter = resetter
        self._max_upload_bytes = max_upload_bytes
        self._home = home or str(Path.home())
        self._own_paths = own_paths

    async def UploadFile(
        self, request_iterator: AsyncIterator[file_pb.UploadFileRequest], context: Context
    ) -> file_pb.UploadFileResponse:
        self._activity.touch()
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("header"):
            await _abort(context, InvalidArgumentError("the first message must be the header"))
        header = first.header

        async def chunks() -> AsyncIterator[bytes]:
            async for message in request_iterator:
                if message.HasField("header"):
                    raise InvalidArgumentError("only the first message may be a header")
                yield message.chunk

        async def write() -> files.UploadResult:
            try:
                return await files.write_file(
                    header.path,
                    chunks(),
                    mode=header.mode,
                    make_parents=header.make_parents,
                    overwrite=header.overwrite,
                    max_bytes=self._max_upload_bytes,
                )
            except ResourceExhaustedError:
                await _drain(request_iterator)
                raise

        result = await _call(context, write)
        self._activity.touch()
        return file_pb.UploadFileResponse(path=result.path, size=result.size, sha256=result.sha256)

    async def DownloadFile(
        self, request: file_pb.DownloadFileRequest, context: Context
    ) -> AsyncIterator[file_pb.DownloadFileResponse]:
        self._activity.touch()
        try:
            info, handle = files.open_for_download(request.path)
        except (RuntimeToolError, ValueError, OSError) as exc:
            await _abort(context, _domain_error(exc))
        chunk_size = min(request.chunk_size or files.DEFAULT_CHUNK_SIZE, files.MAX_CHUNK_SIZE)
        with handle:
            header = file_pb.DownloadFileHeader(size=info.size, mode=info.mode)
            yield file_pb.DownloadFileResponse(header=header)
            chunks = files.read_chunks(handle, chunk_size)
            while True:
                try:
                    chunk = await anext(chunks, None)
                except (RuntimeToolError, OSError) as exc:  # e.g. EIO half-way through
                    await _abort(context, _domain_error(exc))
                if chunk is None:
                    break
                yield file_pb.DownloadFileResponse(chunk=chunk)
        self._activity.touch()

    async def ListFiles(
        self, request: file_pb.ListFilesRequest, context: Context
    ) -> file_pb.ListFilesResponse:
        try:
            entries, truncated = files.list_tree(request.path, max_depth=request.max_depth)
        except (RuntimeToolError, ValueError, OSError) as exc:
            await _abort(context, _domain_error(exc))
        return file_pb.ListFilesResponse(
            entries=[
                file_pb.FileEntry(path=e.path, is_dir=e.is_dir, size=e.size, mode=e.mode)
                for e in entries
            ],
            truncated=truncated,
        )

    async def SnapshotTree(
        self, request: file_pb.SnapshotTreeRequest, context: Context
    ) -> AsyncIterator[file_pb.SnapshotTreeResponse]:
        self._activity.touch()
        if self._workdir is None:
            await _abort(context, _NO_TREE)
        try:
            roots = resolve_extra_roots(request.extra_roots, self._workdir, self._home)
        except InvalidArgumentError as exc:
            await _abort(context, exc)
        chunks = tree_archive.snapshot_tree(self._workdir, roots, self._own_paths())
        # The first message says which extra roots the archive holds (also when it is empty).
        listed: list[str] | None = [str(root) for root in roots]
        try:
            while True:
                try:
                    chunk = await anext(chunks, None)
                except (RuntimeToolError, OSError) as exc:
                    await _abort(context, _domain_error(exc))
                if chunk is None:
                    break
                yield file_pb.SnapshotTreeResponse(chunk=chunk, extra_roots=listed or ())
                listed = None
        finally:
            await chunks.aclose()  # stops the archiving thread when the client went away
        self._activity.touch()

    async def RestoreTree(
        self, request_iterator: AsyncIterator[file_pb.RestoreTreeRequest], context: Context
    ) -> file_pb.RestoreTreeResponse:
        self._activity.touch()
        resetter = self._resetter
        if resetter is None:
            await _abort(context, _NO_TREE)
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("header"):
            await _abort(context, InvalidArgumentError("the first message must be the header"))

        async def chunks() -> AsyncIterator[bytes]:
            async for message in request_iterator:
                if message.HasField("header"):
                    raise InvalidArgumentError("only the first message may be a header")
                yield message.chunk

        header = first.header
        extra = tuple(Path(root) for root in header.extra_roots)
        if any(not root.is_absolute() or root.parent == root for root in extra):
            await _abort(context, InvalidArgumentError("an extra root must be absolute, not /"))
        restored = await _call(
            context,
            lambda: resetter.restore_tree(
                chunks(), as_baseline=header.as_baseline, extra_roots=extra,
                keep=self._own_paths(),
            ),
        )  # fmt: skip
        self._activity.touch()
        return file_pb.RestoreTreeResponse(entries=restored.entries, bytes=restored.bytes)


class SystemServicer(system_grpc.SystemServiceServicer):
    def __init__(
        self,
        activity: ActivityClock,
        sessions: BashSessions,
        binder: SessionBinder,
        auth: TokenAuthInterceptor,
        *,
        resetter: Resetter,
        cgroup_memory: Callable[[], tuple[int, int] | None] | None = None,
    ) -> None:
        self._resetter = resetter
        self._activity = activity
        self._sessions = sessions
        self._binder = binder
        self._auth = auth
        self._cgroup_memory = cgroup_memory

    async def GetStats(
        self, request: system_pb.GetStatsRequest, context: Context
    ) -> system_pb.GetStatsResponse:
        snapshot = collect_stats(self._activity, cgroup_memory=self._cgroup_memory)
        return system_pb.GetStatsResponse(
            memory_current_bytes=snapshot.memory_current_bytes,
            memory_peak_bytes=snapshot.memory_peak_bytes,
            memory_source=_MEMORY_SOURCES.get(
                snapshot.memory_source, system_pb.MEMORY_SOURCE_UNSPECIFIED
            ),
            process_count=snapshot.process_count,
            uptime_seconds=snapshot.uptime_s,
            last_activity_unix=snapshot.last_activity_unix,
            idle_seconds=snapshot.idle_s,
            bash_sessions=self._sessions.session_count,
            running_commands=self._sessions.running_count,
            session=self._binder.session,
            bash_session_names=self._sessions.names,
        )

    async def BindSession(
        self, request: system_pb.BindSessionRequest, context: Context
    ) -> system_pb.BindSessionResponse:
        metadata = context.invocation_metadata()
        binding = await _call(
            context,
            lambda: self._binder.bind(
                request.token,
                dict(request.env),
                request.session,
                still_authorized=lambda: self._auth.accepts(metadata),
            ),
        )
        return system_pb.BindSessionResponse(
            closed_sessions=binding.closed_sessions, bound_unix=binding.bound_unix
        )

    async def Reset(
        self, request: system_pb.ResetRequest, context: Context
    ) -> system_pb.ResetResponse:
        report = await _call(context, self._resetter.reset)
        return system_pb.ResetResponse(
            closed_sessions=report.closed_sessions,
            killed_processes=report.killed_processes,
            removed_paths=report.removed_paths,
            restored_paths=report.restored_paths,
            dropped_commands=report.dropped_commands,
            duration_seconds=report.duration_s,
        )

    async def CaptureBaseline(
        self, request: system_pb.CaptureBaselineRequest, context: Context
    ) -> system_pb.CaptureBaselineResponse:
        baseline = await _call(context, self._resetter.capture_baseline)
        return system_pb.CaptureBaselineResponse(paths=baseline.paths, bytes=baseline.size)
