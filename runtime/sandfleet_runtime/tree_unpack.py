"""RestoreTree's unpacking: a streamed tar archive written into staging directories, safely.

A worker thread parses the archive with tarfile while the client still sends it: the thread
pulls each chunk from the event loop when it needs one (no queue to poll; a slow client
blocks the thread, a slow disk stops the pulling). Every member passes tarfile's `data`
filter (or `_data_filter_fallback` on a Python without one) plus two refusals of our own
(absolute names and `..` components, which the filter would silently rewrite); outward
symbolic links are restored as links only (`_outward_link`).

Regular files and directories, nearly every member of a working tree, are written here
rather than by `TarFile.extract`: one `open` without following a final symlink, large
writes, the mode and time set on the open descriptor; directories' modes and times once all
their contents are in (which also keeps their mtimes, which extract's order lost). Links and
anything unusual still go through `TarFile.extract`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

from sandfleet_runtime.errors import InvalidArgumentError
from sandfleet_runtime.tree_roots import route_member

__all__ = ["ChunkReader", "ReaderClosedError", "RestoredTree", "unpack"]

COPY_BYTES = 1 << 20
"""The largest single read from the archive and write into a file."""
STREAM_BUFFER_BYTES = 32 * 1024
"""tarfile's own read size in stream mode: each header read copies what is left of it, so
it stays small; a file's data is read in COPY_BYTES pieces regardless."""
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class ReaderClosedError(Exception):
    """The restore was abandoned (the client went away, or the call ended): the thread stops."""


class ChunkReader:
    """A read-only file for tarfile, in the worker thread, over the client's chunks, which
    it asks the event loop for one at a time (each ask waits for the chunk to arrive)."""

    def __init__(self, chunks: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._chunks = chunks
        self._loop = loop
        self._chunk = b""
        self._offset = 0
        self._eof = False
        self._closed = False
        self._pending: concurrent.futures.Future[bytes | None] | None = None

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (fewer at a chunk's end, as a pipe would); b"" at the end."""
        while self._offset >= len(self._chunk):
            if self._eof:
                return b""
            chunk = self._next()
            if chunk is None:
                self._eof = True
                return b""
            self._chunk, self._offset = chunk, 0
        start = self._offset
        end = len(self._chunk) if size < 0 else min(len(self._chunk), start + size)
        self._offset = end
        if start == 0 and end == len(self._chunk):
            return self._chunk
        return self._chunk[start:end]

    def _next(self) -> bytes | None:
        if self._closed:
            raise ReaderClosedError
        self._pending = asyncio.run_coroutine_threadsafe(anext(self._chunks, None), self._loop)
        if self._closed:  # closed while the ask was being made
            self._pending.cancel()
        try:
            return self._pending.result()
        except concurrent.futures.CancelledError:
            raise ReaderClosedError from None

    def close(self) -> None:
        """From the loop: the thread's current and next asks end in ReaderClosedError."""
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_file(stream: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
    """A regular file's data from the archive, in large pieces, with its mode and time set
    on the descriptor. A symlink in its place (an inward one: the filter refused any other)
    is replaced by the file, never written through."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o600)
    except FileNotFoundError:  # a member whose directories the archive does not list
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, _OPEN_FLAGS, 0o600)
    except OSError as error:
        if not os.path.islink(path):
            raise error from None
        os.unlink(path)
        fd = os.open(path, _OPEN_FLAGS, 0o600)
    try:
        source = stream.fileobj
        assert source is not None  # an open archive has its stream
        remaining = member.size
        while remaining:
            piece = source.read(min(remaining, COPY_BYTES))
            if not piece:
                raise tarfile.ReadError("unexpected end of data")
            _write_all(fd, piece)
            remaining -= len(piece)
        if member.mode is not None:
            os.fchmod(fd, member.mode)
        if member.mtime is not None:
            os.utime(fd, (member.mtime, member.mtime))
    finally:
        os.close(fd)


_DirAttrs = tuple[str, int | None, float | None]


def _make_dir(member: tarfile.TarInfo, path: str, later: list[_DirAttrs]) -> None:
    """The directory, owner-only until its mode and time are set (`_set_dir_attrs`)."""
    try:
        os.makedirs(path, 0o700 if member.mode is not None else 0o777)
    except FileExistsError:
        if os.path.islink(path):  # an inward link (the filter refused any other): as extract
            return  # would leave it, minus following it to change its target's mode
    later.append((path, member.mode, member.mtime))


def _set_dir_attrs(later: list[_DirAttrs]) -> None:
    """Modes and times of the directories, deepest first (a child's write would move its
    parent's mtime), each on a descriptor that refuses a symlink in its place."""
    for path, mode, mtime in sorted(later, key=lambda item: item[0].count("/"), reverse=True):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)


def _extract(archive: tarfile.TarFile, safe: tarfile.TarInfo, destination: str,
             later: list[_DirAttrs]) -> None:  # fmt: skip
    """One member that passed the filters, into `destination`."""
    path = os.path.join(destination, safe.name)
    if safe.isreg() and not safe.sparse:
        _write_file(archive, safe, path)
    elif safe.isdir():
        _make_dir(safe, path, later)
    # The member is already filtered; where tarfile has filters, it must not filter again.
    elif _STDLIB_DATA_FILTER is None:
        archive.extract(safe, destination)
    else:
        archive.extract(safe, destination, filter="fully_trusted")


def unpack(reader: ChunkReader, staging: str, extra: dict[Path, str]) -> RestoredTree:
    """Unpacks into `staging` (the working tree's) and `extra` (each extra root -> its
    staging). InvalidArgumentError for an unsafe member or an unreadable archive."""
    entries = size = 0
    later: list[_DirAttrs] = []
    roots = tuple(extra)
    unsafe = (_UnsafeMemberError, *((tarfile.FilterError,) if _STDLIB_DATA_FILTER else ()))
    try:
        with tarfile.open(fileobj=reader, mode="r|*", bufsize=STREAM_BUFFER_BYTES) as archive:  # type: ignore[call-overload]
            for member in archive:
                root, routed = route_member(member, roots)
                if routed.name == ".":  # an extra root itself: its mode is the target's
                    continue
                destination = staging if root is None else extra[root]
                safe = _refuse_unsafe(routed, destination)
                if safe is None:
                    continue
                _extract(archive, safe, destination, later)
                entries += 1
                size += safe.size if safe.isreg() else 0
        _set_dir_attrs(later)
    except unsafe as error:
        raise InvalidArgumentError(f"the archive member is unsafe: {error}") from None
    except tarfile.ReadError as error:
        raise InvalidArgumentError(f"this is not a readable tar archive ({error})") from None
    return RestoredTree(entries, size)
