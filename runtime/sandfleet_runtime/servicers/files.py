"""The FileService servicer: uploads, downloads, listings, tree snapshots and restores."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path

from sandfleet_proto.runtime.v1 import (
    file_service_pb2 as file_pb,
)
from sandfleet_proto.runtime.v1 import (
    file_service_pb2_grpc as file_grpc,
)

from .. import files, tree_archive
from ..errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    RuntimeToolError,
)
from ..reset import Resetter
from ..settings import DEFAULT_MAX_UPLOAD_BYTES
from ..stats import ActivityClock
from ..tree_roots import resolve_extra_roots
from .calls import Context, abort, call, domain_error

log = logging.getLogger(__name__)


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
            await abort(context, InvalidArgumentError("the first message must be the header"))
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

        result = await call(context, write)
        self._activity.touch()
        return file_pb.UploadFileResponse(path=result.path, size=result.size, sha256=result.sha256)

    async def DownloadFile(
        self, request: file_pb.DownloadFileRequest, context: Context
    ) -> AsyncIterator[file_pb.DownloadFileResponse]:
        self._activity.touch()
        try:
            info, handle = files.open_for_download(request.path)
        except (RuntimeToolError, ValueError, OSError) as exc:
            await abort(context, domain_error(exc))
        chunk_size = min(request.chunk_size or files.DEFAULT_CHUNK_SIZE, files.MAX_CHUNK_SIZE)
        with handle:
            header = file_pb.DownloadFileHeader(size=info.size, mode=info.mode)
            yield file_pb.DownloadFileResponse(header=header)
            chunks = files.read_chunks(handle, chunk_size)
            while True:
                try:
                    chunk = await anext(chunks, None)
                except (RuntimeToolError, OSError) as exc:  # e.g. EIO half-way through
                    await abort(context, domain_error(exc))
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
            await abort(context, domain_error(exc))
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
            await abort(context, _NO_TREE)
        try:
            roots = resolve_extra_roots(request.extra_roots, self._workdir, self._home)
        except InvalidArgumentError as exc:
            await abort(context, exc)
        chunks = tree_archive.snapshot_tree(self._workdir, roots, self._own_paths())
        # The first message says which extra roots the archive holds (also when it is empty).
        listed: list[str] | None = [str(root) for root in roots]
        try:
            while True:
                try:
                    chunk = await anext(chunks, None)
                except (RuntimeToolError, OSError) as exc:
                    await abort(context, domain_error(exc))
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
            await abort(context, _NO_TREE)
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("header"):
            await abort(context, InvalidArgumentError("the first message must be the header"))

        async def chunks() -> AsyncIterator[bytes]:
            async for message in request_iterator:
                if message.HasField("header"):
                    raise InvalidArgumentError("only the first message may be a header")
                yield message.chunk

        header = first.header
        extra = tuple(Path(root) for root in header.extra_roots)
        if any(not root.is_absolute() or root.parent == root for root in extra):
            await abort(context, InvalidArgumentError("an extra root must be absolute, not /"))
        restored = await call(
            context,
            lambda: resetter.restore_tree(
                chunks(), as_baseline=header.as_baseline, extra_roots=extra,
                keep=self._own_paths(),
            ),
        )  # fmt: skip
        self._activity.touch()
        return file_pb.RestoreTreeResponse(entries=restored.entries, bytes=restored.bytes)
