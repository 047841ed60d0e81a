"""The working tree as a streamed tar archive: snapshot it out, restore one in (safely).

Both directions run tarfile in a worker thread that hands chunks to (or asks them of) the
event loop one at a time, bounded, so a 100 MB tree never sits in memory, a slow peer slows
the thread down instead of growing a buffer, and neither side polls. Restore unpacks into a
staging directory inside the tree (tree_unpack: the archive's safety checks) and swaps the
staged tree in only once the whole archive was accepted: a refused archive leaves the tree
as it was.

Extra roots (tree_roots: the home directory, /tmp) travel in the same archive under their
absolute names; each is staged and swapped in like the working tree. Paths the runtime
itself uses there (its bash driver's directory) are neither archived nor replaced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from pathlib import Path

from sandfleet_runtime.baseline import walk_tree
from sandfleet_runtime.errors import FailedPreconditionError, InvalidArgumentError
from sandfleet_runtime.tree_roots import tag_member
from sandfleet_runtime.tree_unpack import ChunkReader, ReaderClosedError, RestoredTree, unpack

__all__ = ["ARCHIVE_CHUNK_BYTES", "RestoredTree", "restore_tree", "snapshot_tree"]

ARCHIVE_CHUNK_BYTES = 256 * 1024
_QUEUE_CHUNKS = 8
"""Chunks in flight between the thread and the loop (2 MiB): the whole memory bound."""
STAGING_PREFIX = ".sandfleet-restore-"


class _AbortedError(Exception):
    """The other side went away; the worker thread stops."""


class _LoopWriter:
    """A write-only file for tarfile, in the worker thread, that hands ARCHIVE_CHUNK_BYTES
    pieces to an asyncio queue on the loop (waiting while it is full)."""

    def __init__(
        self, chunks: asyncio.Queue[bytes | None], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._chunks = chunks
        self._loop = loop
        self._pending = bytearray()
        self._closed = False
        self._put_future: concurrent.futures.Future[None] | None = None

    def write(self, data: bytes) -> int:
        self._pending += data
        while len(self._pending) >= ARCHIVE_CHUNK_BYTES:
            self._put(bytes(self._pending[:ARCHIVE_CHUNK_BYTES]))
            del self._pending[:ARCHIVE_CHUNK_BYTES]
        return len(data)

    def finish(self) -> None:
        if self._pending:
            self._put(bytes(self._pending))

    def end(self) -> None:
        """The end mark (also after a failure: the loop then reads the thread's error)."""
        with contextlib.suppress(_AbortedError):
            self._put(None)

    def _put(self, chunk: bytes | None) -> None:
        if self._closed:
            raise _AbortedError
        self._put_future = asyncio.run_coroutine_threadsafe(self._chunks.put(chunk), self._loop)
        if self._closed:  # closed while the put was being made
            self._put_future.cancel()
        try:
            self._put_future.result()
        except concurrent.futures.CancelledError:
            raise _AbortedError from None

    def close(self) -> None:
        """From the loop: the thread's current and next puts end in _AbortedError."""
        self._closed = True
        if self._put_future is not None:
            self._put_future.cancel()


def _archivable(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Regular files, directories and links only; owners are not carried across sandboxes."""
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return None
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def _add_tree(archive: tarfile.TarFile, root: Path, skip: Collection[Path], *, extra: bool) -> None:
    skipped = [str(p.relative_to(root)) for p in skip if root in p.parents]
    # A hard link is only ever recorded within one root (each is restored on its own).
    archive.inodes.clear()  # type: ignore[attr-defined]  # (typeshed lacks it)
    for relative, _ in walk_tree(root):
        if relative.startswith(STAGING_PREFIX):  # a RestoreTree in progress
            continue
        if any(relative == s or relative.startswith(f"{s}/") for s in skipped):
            continue

        def named(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
            kept = _archivable(member)
            return tag_member(kept, root) if kept is not None and extra else kept

        with contextlib.suppress(FileNotFoundError):  # removed by a command since the walk
            archive.add(root / relative, arcname=relative, recursive=False, filter=named)


def _write_archive(
    root: Path, extra_roots: Sequence[Path], skip: Collection[Path], writer: _LoopWriter
) -> None:
    try:
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
            _add_tree(archive, root, skip, extra=False)
            for extra in extra_roots:
                _add_tree(archive, extra, skip, extra=True)
        writer.finish()
    finally:
        writer.end()


async def snapshot_tree(
    root: Path, extra_roots: Sequence[Path] = (), skip: Collection[Path] = ()
) -> AsyncGenerator[bytes, None]:
    """The tar archive of everything below `root` (and below each of `extra_roots`, named
    absolutely), leaving out `skip`, in chunks, produced while it streams."""
    chunks: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE_CHUNKS)
    writer = _LoopWriter(chunks, asyncio.get_running_loop())
    worker = asyncio.ensure_future(
        asyncio.to_thread(_write_archive, root, extra_roots, skip, writer)
    )
    try:
        while (chunk := await chunks.get()) is not None:
            yield chunk
        await worker  # raises what the thread raised
    finally:
        writer.close()
        if not worker.done():
            with contextlib.suppress(_AbortedError):
                await worker


def _swap_in(root: Path, staging: Path, keep: Collection[Path] = ()) -> None:
    """Replaces everything in `root` but `staging` (and `keep`) with what `staging` holds."""
    for name in os.listdir(root):
        path = root / name
        # A mounted volume is not the tree's; `keep` is the runtime's own (its bash driver).
        if path == staging or path in keep or os.path.ismount(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    for name in os.listdir(staging):
        if root / name in keep:
            continue  # an archive from before the runtime excluded it: the live one stays
        os.rename(staging / name, root / name)
    shutil.rmtree(staging)


def _swap_all_in(stagings: dict[Path, Path], keep: Collection[Path]) -> None:
    for tree, staging in stagings.items():
        _swap_in(tree, staging, keep)


def _remove_stagings(stagings: Collection[Path]) -> None:
    for staging in stagings:
        shutil.rmtree(staging, ignore_errors=True)


async def restore_tree(
    root: Path,
    chunks: AsyncIterator[bytes],
    extra_roots: Sequence[Path] = (),
    keep: Collection[Path] = (),
) -> RestoredTree:
    """Replaces the tree below `root` (and below each of `extra_roots`, from the archive's
    absolutely named members) with the tar archive in `chunks`, or refuses it whole.
    `keep`: paths in those trees that stay as they are (the runtime's own).

    InvalidArgumentError (trees unchanged) for anything but a safe tar archive.
    """
    if root.parent == root:  # "/" (the runtime passes the resolved working directory)
        raise FailedPreconditionError(
            "The working directory is /; restoring a tree needs a dedicated working directory."
        )
    stagings = {
        tree: Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=tree))
        for tree in (root, *extra_roots)
    }
    extra = {tree: str(stagings[tree]) for tree in extra_roots}
    reader = ChunkReader(chunks, asyncio.get_running_loop())
    worker = asyncio.ensure_future(asyncio.to_thread(unpack, reader, str(stagings[root]), extra))
    try:
        try:
            restored = await worker
        except InvalidArgumentError as error:
            trees = "working tree and the extra roots are" if extra_roots else "working tree is"
            raise InvalidArgumentError(
                f"The archive was refused, {error}; the {trees} unchanged."
            ) from None
        await asyncio.to_thread(_swap_all_in, stagings, keep)
        return restored
    finally:
        reader.close()
        if not worker.done():
            with contextlib.suppress(ReaderClosedError, InvalidArgumentError, OSError):
                await worker
        await asyncio.to_thread(_remove_stagings, stagings.values())  # gone once swapped in
