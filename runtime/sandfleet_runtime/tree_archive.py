"""The working tree as a streamed tar archive: snapshot it out, restore one in (safely).

Both directions run tarfile in a worker thread connected to the event loop by a small
bounded queue, so a 100 MB tree never sits in memory and a slow peer slows the thread
down instead of growing a buffer. Restore unpacks into a staging directory inside the
tree with tarfile's `data` filter plus two refusals of our own (absolute names and `..`
components, which the filter would silently rewrite), and swaps the staged tree in only
once the whole archive was accepted: a refused archive leaves the tree as it was.

Extra roots (tree_roots: the home directory, /tmp) travel in the same archive under their
absolute names; each is staged and swapped in like the working tree. Paths the runtime
itself uses there (its bash driver's directory) are neither archived nor replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import os
import queue
import shutil
import tarfile
import tempfile
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from pathlib import Path

from sandfleet_runtime.baseline import walk_tree
from sandfleet_runtime.errors import FailedPreconditionError, InvalidArgumentError
from sandfleet_runtime.tree_roots import route_member, tag_member

__all__ = ["ARCHIVE_CHUNK_BYTES", "RestoredTree", "restore_tree", "snapshot_tree"]

ARCHIVE_CHUNK_BYTES = 256 * 1024
_QUEUE_CHUNKS = 8
"""Chunks in flight between the thread and the loop (2 MiB): the whole memory bound."""
_POLL_S = 0.05
STAGING_PREFIX = ".sandfleet-restore-"


class _AbortedError(Exception):
    """The other side went away; the worker thread stops."""


class _QueueWriter:
    """A write-only file for tarfile that hands ARCHIVE_CHUNK_BYTES pieces to the loop."""

    def __init__(self, chunks: queue.Queue[bytes | None], stop: threading.Event) -> None:
        self._chunks = chunks
        self._stop = stop
        self._pending = bytearray()

    def write(self, data: bytes) -> int:
        self._pending += data
        while len(self._pending) >= ARCHIVE_CHUNK_BYTES:
            self._put(bytes(self._pending[:ARCHIVE_CHUNK_BYTES]))
            del self._pending[:ARCHIVE_CHUNK_BYTES]
        return len(data)

    def finish(self) -> None:
        if self._pending:
            self._put(bytes(self._pending))
        self._put(None)

    def _put(self, chunk: bytes | None) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._chunks.put(chunk, timeout=_POLL_S)
                return
        raise _AbortedError


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
    root: Path, extra_roots: Sequence[Path], skip: Collection[Path], writer: _QueueWriter
) -> None:
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
        _add_tree(archive, root, skip, extra=False)
        for extra in extra_roots:
            _add_tree(archive, extra, skip, extra=True)
    writer.finish()


async def snapshot_tree(
    root: Path, extra_roots: Sequence[Path] = (), skip: Collection[Path] = ()
) -> AsyncGenerator[bytes, None]:
    """The tar archive of everything below `root` (and below each of `extra_roots`, named
    absolutely), leaving out `skip`, in chunks, produced while it streams."""
    chunks: queue.Queue[bytes | None] = queue.Queue(_QUEUE_CHUNKS)
    stop = threading.Event()
    writer = _QueueWriter(chunks, stop)
    worker = asyncio.ensure_future(
        asyncio.to_thread(_write_archive, root, extra_roots, skip, writer)
    )
    try:
        while True:
            try:
                chunk = chunks.get_nowait()
            except queue.Empty:
                if worker.done():
                    worker.result()  # raises what the thread raised
                    if chunks.empty():
                        return
                    continue
                await asyncio.wait({worker}, timeout=0.002)
                continue
            if chunk is None:
                break
            yield chunk
        await worker
    finally:
        stop.set()
        if not worker.done():
            with contextlib.suppress(_AbortedError):
                await worker


class _QueueReader:
    """A read-only file for tarfile fed with the chunks the client streams."""

    def __init__(self, chunks: queue.Queue[bytes | None], stop: threading.Event) -> None:
        self._chunks = chunks
        self._stop = stop
        self._buffer = bytearray()
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._buffer) < size):
            chunk = self._get()
            if chunk is None:
                self._eof = True
            else:
                self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _get(self) -> bytes | None:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Empty):
                return self._chunks.get(timeout=_POLL_S)
        raise _AbortedError


@dataclasses.dataclass(frozen=True, slots=True)
class RestoredTree:
    entries: int
    bytes: int


_STDLIB_DATA_FILTER = getattr(tarfile, "data_filter", None)
"""tarfile's `data` filter (Python 3.12, and 3.11.4+); older builds (Debian's 3.11.2, which
runtime images run) have none, and `_data_filter_fallback` does its job."""


class _UnsafeMemberError(Exception):
    """The fallback filter's refusal (tarfile.FilterError where the stdlib has filters)."""


def _refuse_unsafe(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, preceded by the refusals it would turn into rewrites."""
    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        raise InvalidArgumentError(f"the archive member {name!r} has an absolute path")
    if ".." in name.replace("\\", "/").split("/"):
        raise InvalidArgumentError(f"the archive member {name!r} has a '..' component")
    if member.issym() and _points_out(member, destination):
        return _outward_link(member, destination)
    if _STDLIB_DATA_FILTER is None:
        return _data_filter_fallback(member, destination)
    safe: tarfile.TarInfo | None = _STDLIB_DATA_FILTER(member, destination)
    return safe


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _points_out(link: tarfile.TarInfo, destination: str) -> bool:
    """A symbolic link to an absolute path or out of the destination (a virtualenv's
    `bin/python -> /usr/bin/python3`, a dotfile linked to a system file)."""
    if os.path.isabs(link.linkname):
        return True
    root = os.path.realpath(destination)
    here = os.path.dirname(os.path.join(root, link.name))
    return not _inside(os.path.realpath(os.path.join(here, link.linkname)), root)


def _outward_link(link: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    """A link that points out of the destination, restored as the link it is: the sandbox's
    user makes the same with `ln -s`, and it gives nothing the sandbox does not already
    reach. tarfile's `data` filter refuses such links because a later member could be written
    through one; here every later member's path is still resolved through the links unpacked
    so far and refused when it lands outside (the filters' check), and the link itself must
    sit inside, reached without leaving through an earlier link. Hard links stay refused."""
    root = os.path.realpath(destination)
    parent = os.path.realpath(os.path.join(root, os.path.dirname(link.name)))
    if not _inside(parent, root):
        raise _UnsafeMemberError(
            f"{link.name!r} would be extracted into {parent!r}, which is outside the destination"
        )
    safe = copy.copy(link)
    safe.uid, safe.gid = os.getuid(), os.getgid()
    safe.uname = safe.gname = ""
    return safe


def _data_filter_fallback(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    """What tarfile's `data` filter refuses and rewrites, for a Python without it: no path
    (resolved through links already unpacked) or link target outside the destination, no
    absolute link, no device or FIFO; no setuid/setgid/sticky or group/other write bits,
    owner read/write on files; owned by the runtime's own user."""
    root = os.path.realpath(destination)
    name = member.name
    target = os.path.realpath(os.path.join(root, name))
    if not _inside(target, root):
        raise _UnsafeMemberError(
            f"{name!r} would be extracted to {target!r}, which is outside the destination"
        )
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise _UnsafeMemberError(f"{name!r} is a special file")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise _UnsafeMemberError(f"{name!r} is a link to an absolute path")
        base = os.path.dirname(target) if member.issym() else root
        linked = os.path.realpath(os.path.join(base, member.linkname))
        if not _inside(linked, root):
            raise _UnsafeMemberError(
                f"{name!r} would link to {linked!r}, which is outside the destination"
            )
    safe = copy.copy(member)
    mode = member.mode
    if member.isreg() or member.islnk():
        if not mode & 0o100:
            mode &= ~0o111
        mode |= 0o600
    elif member.isdir():
        mode |= 0o700
    safe.mode = mode & 0o755
    safe.uid, safe.gid = os.getuid(), os.getgid()
    safe.uname = safe.gname = ""
    return safe


def _unpack(reader: _QueueReader, staging: str, extra: dict[Path, str]) -> RestoredTree:
    """Unpacks into `staging` (the working tree's) and `extra` (each extra root's staging)."""
    entries = size = 0
    # The member is already filtered; where tarfile has filters, it must not filter again.
    trusted: dict[str, str] = {} if _STDLIB_DATA_FILTER is None else {"filter": "fully_trusted"}
    unsafe = (_UnsafeMemberError, *((tarfile.FilterError,) if _STDLIB_DATA_FILTER else ()))
    try:
        with tarfile.open(fileobj=reader, mode="r|*") as archive:  # type: ignore[call-overload]
            for member in archive:
                root, routed = route_member(member, tuple(extra))
                if routed.name == ".":  # an extra root itself: its mode is the target's
                    continue
                destination = staging if root is None else extra[root]
                safe = _refuse_unsafe(routed, destination)
                if safe is None:
                    continue
                archive.extract(safe, destination, **trusted)
                entries += 1
                size += safe.size if safe.isreg() else 0
    except unsafe as error:
        raise InvalidArgumentError(f"the archive member is unsafe: {error}") from None
    except tarfile.ReadError as error:
        raise InvalidArgumentError(f"this is not a readable tar archive ({error})") from None
    return RestoredTree(entries, size)


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


async def _feed(
    worker: asyncio.Future[RestoredTree],
    pipe: queue.Queue[bytes | None],
    chunks: AsyncIterator[bytes],
) -> None:
    """The client's chunks into the unpacking thread, then the end; stops early when the
    thread is done (it refused the archive, or finished)."""
    async for chunk in chunks:
        while not worker.done():
            try:
                pipe.put_nowait(chunk)
                break
            except queue.Full:
                await asyncio.wait({worker}, timeout=0.002)
        if worker.done():
            return
    while not worker.done():
        try:
            pipe.put_nowait(None)
            return
        except queue.Full:
            await asyncio.wait({worker}, timeout=0.002)


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
    pipe: queue.Queue[bytes | None] = queue.Queue(_QUEUE_CHUNKS)
    stop = threading.Event()
    extra = {tree: str(stagings[tree]) for tree in extra_roots}
    reader = _QueueReader(pipe, stop)
    worker = asyncio.ensure_future(asyncio.to_thread(_unpack, reader, str(stagings[root]), extra))
    try:
        await _feed(worker, pipe, chunks)
        try:
            restored = await worker
        except InvalidArgumentError as error:
            trees = "working tree and the extra roots are" if extra_roots else "working tree is"
            raise InvalidArgumentError(
                f"The archive was refused, {error}; the {trees} unchanged."
            ) from None
        for tree, staging in stagings.items():
            await asyncio.to_thread(_swap_in, tree, staging, keep)
        return restored
    finally:
        stop.set()
        if not worker.done():
            with contextlib.suppress(_AbortedError, InvalidArgumentError, OSError):
                await worker
        for staging in stagings.values():  # gone once swapped in
            await asyncio.to_thread(shutil.rmtree, staging, True)
