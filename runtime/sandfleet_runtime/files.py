"""File transfer in and out of the sandbox: chunked atomic upload, chunked download, tree listing.

Memory stays bounded whatever the file size: uploads are written in batches of about a MiB
and downloads are read in blocks of about a MiB; neither ever holds the whole file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import hashlib
import os
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO

from sandfleet_runtime.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from sandfleet_runtime.settings import DEFAULT_MAX_UPLOAD_BYTES

DEFAULT_CHUNK_SIZE = 64 * 1024
"""Download chunk size when the request leaves it at 0."""
MAX_CHUNK_SIZE = 1024 * 1024
"""Largest download chunk a request may ask for."""
DEFAULT_FILE_MODE = 0o644
"""Permission bits of an uploaded or created file when none are given."""

_IO_BATCH_BYTES = 1024 * 1024  # one worker-thread hop per MiB, not per 64 KiB chunk
# link(2) is how we publish without clobbering; these say the filesystem cannot do it.
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV}


@dataclasses.dataclass(frozen=True, slots=True)
class UploadResult:
    path: str
    size: int
    sha256: str
    """Hex digest of the bytes written."""


@dataclasses.dataclass(frozen=True, slots=True)
class FileInfo:
    size: int
    mode: int
    """Permission bits only (e.g. 0o755)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    path: str
    """The listed path joined with the names below it (not resolved)."""
    is_dir: bool
    size: int
    """Bytes for files and symlinks (the link itself); 0 for directories."""
    mode: int
    """Permission bits only."""


def require_absolute(path: str) -> None:
    if not os.path.isabs(path):
        raise InvalidArgumentError(f"The path {path!r} is not absolute; it must start with `/`.")


def create_temp_beside(path: str) -> tuple[int, str]:
    """Opens a hidden temporary file in `path`'s directory (so a rename is atomic)."""
    directory, name = os.path.split(path)
    return tempfile.mkstemp(prefix=f".{name[:100]}.", suffix=".partial", dir=directory)


def publish(temp_path: str, path: str, *, overwrite: bool) -> None:
    """Moves a finished temporary file to `path` atomically.

    Without `overwrite` an existing `path` raises FileExistsError and is left untouched, even
    if it appeared while the temporary file was being written (link(2) fails on it).
    """
    if overwrite:
        os.replace(temp_path, path)
        return
    try:
        os.link(temp_path, path)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in _NO_HARD_LINKS:
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "File exists", path) from None
        os.rename(temp_path, path)
        return
    os.unlink(temp_path)


def discard_temp(fd: int, temp_path: str) -> None:
    if fd >= 0:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp_path)


def write_bytes_atomically(
    path: str, data: bytes, *, mode: int, overwrite: bool, owner: tuple[int, int] | None = None
) -> None:
    """Writes `data` to `path` through a temporary file and a rename, with `mode` bits applied
    (the umask does not apply). `owner` (uid, gid) is restored when permitted."""
    fd, temp_path = create_temp_beside(path)
    try:
        _write_all(fd, data)
        os.fchmod(fd, mode)
        if owner is not None and owner != (os.getuid(), os.getgid()):
            # Only root may give a file away; without that right the new owner is us.
            with contextlib.suppress(PermissionError):
                os.fchown(fd, *owner)
        os.close(fd)
        fd = -1
        publish(temp_path, path, overwrite=overwrite)
    except BaseException:
        discard_temp(fd, temp_path)
        raise


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_batch(fd: int, batch: list[bytes], digest: hashlib._Hash) -> None:
    for chunk in batch:
        digest.update(chunk)
        _write_all(fd, chunk)


class _Upload:
    """The temporary file behind one upload; it is removed unless the upload is published."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd, self.temp_path = create_temp_beside(path)
        except OSError as e:
            raise _write_error(path, e) from None
        self.size = 0
        self.digest = hashlib.sha256()
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._in_flight: asyncio.Future[None] | None = None

    async def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._batch.append(chunk)
        self._batch_bytes += len(chunk)
        if self._batch_bytes >= _IO_BATCH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        if not self._batch:
            return
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        loop = asyncio.get_running_loop()
        self._in_flight = loop.run_in_executor(
            None, functools.partial(_write_batch, self.fd, batch, self.digest)
        )
        # shield: a cancelled caller must not mark the write finished while the thread still
        # uses the descriptor (see discard).
        try:
            await asyncio.shield(self._in_flight)
        except OSError as e:
            raise _write_error(self.path, e) from None
        self._in_flight = None

    def publish(self, mode: int, *, overwrite: bool) -> None:
        try:
            os.fchmod(self.fd, mode)
            os.close(self.fd)
            self.fd = -1
            publish(self.temp_path, self.path, overwrite=overwrite)
        except FileExistsError:
            raise
        except OSError as e:
            raise _write_error(self.path, e) from None

    def discard(self) -> None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.done():
            discard_temp(self.fd, self.temp_path)
            return

        # Closing now could hand the descriptor number to another file mid-write.
        def discard_when_done(future: asyncio.Future[None]) -> None:
            if not future.cancelled():
                future.exception()  # retrieved, so asyncio does not log it as unhandled
            discard_temp(self.fd, self.temp_path)

        in_flight.add_done_callback(discard_when_done)


async def write_file(
    path: str,
    chunks: AsyncIterator[bytes],
    *,
    mode: int,
    make_parents: bool,
    overwrite: bool,
    max_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
) -> UploadResult:
    """Streams `chunks` into `path`; the file appears complete or not at all.

    A stream that passes `max_bytes` is refused (ResourceExhaustedError) at the chunk that
    passes it: nothing more is read, and the temporary file is removed.

    `mode` is taken as permission bits (file-type bits are ignored; 0 means 0o644).
    """
    require_absolute(path)
    if path.endswith("/"):
        raise InvalidArgumentError(f"{path} names a directory; give the path of a file.")
    await asyncio.to_thread(_prepare_target, path, make_parents=make_parents, overwrite=overwrite)
    upload = _Upload(path)
    try:
        async for chunk in chunks:
            if upload.size + len(chunk) > max_bytes:
                raise ResourceExhaustedError(upload_limit_message(path, max_bytes))
            await upload.add(chunk)
        await upload.flush()
        upload.publish(stat.S_IMODE(mode) or DEFAULT_FILE_MODE, overwrite=overwrite)
    except FileExistsError:
        upload.discard()
        raise AlreadyExistsError(f"{path} already exists (set overwrite to replace it).") from None
    except BaseException:
        upload.discard()
        raise
    return UploadResult(path=path, size=upload.size, sha256=upload.digest.hexdigest())


def upload_limit_message(path: str, max_bytes: int) -> str:
    """What a caller reads when an upload passes the runtime's limit: the limit and its knob."""
    return (
        f"The upload to {path} exceeds the limit of {max_bytes} bytes "
        f"({max_bytes / 2**20:.4g} MiB) per uploaded file; nothing was written. The sandbox's "
        "platform sets it (SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES)."
    )


def _write_error(path: str, error: OSError) -> FailedPreconditionError | ResourceExhaustedError:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceExhaustedError(f"Cannot write {path}: {error.strerror}.")
    return FailedPreconditionError(f"Cannot write {path}: {error.strerror}.")


def _prepare_target(path: str, *, make_parents: bool, overwrite: bool) -> None:
    """Checks an upload target early, before any byte is received; creates parents."""
    try:
        existing = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    else:
        if stat.S_ISDIR(existing.st_mode):
            raise FailedPreconditionError(f"{path} is a directory; upload to a file path in it.")
        if not overwrite:
            raise AlreadyExistsError(f"{path} already exists (set overwrite to replace it).")
    parent = os.path.dirname(path)
    if os.path.isdir(parent):
        return
    if not make_parents:
        raise NotFoundError(f"The directory {parent} does not exist (set make_parents).")
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FailedPreconditionError(
            f"Cannot create the directory {parent}: part of that path is a file."
        ) from None
    except PermissionError:
        raise FailedPreconditionError(
            f"Cannot create the directory {parent}: permission denied."
        ) from None


def open_for_download(path: str) -> tuple[FileInfo, BinaryIO]:
    """Opens a regular file for reading; the caller closes it (`with f:`).

    Anything else is refused with FailedPreconditionError naming its kind: a symlink (the last
    component is never followed, so a link to a secret outside the sandbox's files or to
    /dev/zero cannot be read through it), a FIFO (whose open would block), a device (which
    could stream forever), a socket or a directory.
    """
    require_absolute(path)
    try:
        # lstat first: a device or FIFO is refused without opening it at all.
        seen = _lstat_existing(path)
        _require_regular(path, seen)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        raise FailedPreconditionError(f"Cannot read {path}: permission denied.") from None
    except OSError as e:
        if e.errno == errno.ELOOP:  # swapped for a symlink since the lstat
            raise FailedPreconditionError(_not_regular(path, "a symbolic link")) from None
        raise FailedPreconditionError(f"Cannot read {path}: {e.strerror}.") from None
    try:
        info = os.fstat(fd)
        # The same check on what was opened, in case the path was swapped in between.
        _require_regular(path, info)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return FileInfo(size=info.st_size, mode=stat.S_IMODE(info.st_mode)), f


def _lstat_existing(path: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"The path {path} does not exist.") from None


def _require_regular(path: str, info: os.stat_result) -> None:
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise FailedPreconditionError(f"{path} is a directory; only regular files can be read.")
    raise FailedPreconditionError(_not_regular(path, _kind(mode)))


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _not_regular(path: str, kind: str) -> str:
    return f"{path} is {kind}, not a regular file; only regular files can be read."


async def read_chunks(f: BinaryIO, chunk_size: int) -> AsyncIterator[bytes]:
    """Yields `f` from its current position in chunks of `chunk_size` (the last may be
    shorter). Reads happen in a worker thread, a block of about a MiB at a time.

    A file stops at the size it had when the reading began: a process that keeps appending
    to it cannot make one download endless.
    """
    if chunk_size <= 0:
        raise InvalidArgumentError(f"chunk_size must be positive, got {chunk_size}.")
    block_size = chunk_size * max(1, _IO_BATCH_BYTES // chunk_size)
    remaining = os.fstat(f.fileno()).st_size - f.tell()
    while remaining > 0:
        block = await asyncio.to_thread(f.read, min(block_size, remaining))
        if not block:
            return
        remaining -= len(block)
        for offset in range(0, len(block), chunk_size):
            yield block[offset : offset + chunk_size]
        del block  # before the next read, so two blocks are never held at once


def list_tree(
    path: str, *, max_depth: int = 0, max_entries: int = 10_000, include_hidden: bool = True
) -> tuple[list[Entry], bool]:
    """Lists what is below the directory `path` depth-first, names sorted at each level.

    Returns (entries, truncated). `max_depth` 0 means unlimited; 1 lists only the direct
    children. Symlinks are listed, never followed. Hidden names (leading dot) are skipped and
    not descended into unless `include_hidden`. Unreadable subdirectories are listed but
    left empty. A regular file lists as itself.
    """
    require_absolute(path)
    root = _stat_existing(path)
    if not stat.S_ISDIR(root.st_mode):
        return [Entry(path, False, root.st_size, stat.S_IMODE(root.st_mode))], False
    try:
        top = _sorted_children(path, include_hidden)
    except PermissionError:
        raise FailedPreconditionError(f"Cannot list {path}: permission denied.") from None
    entries: list[Entry] = []
    stack: list[tuple[Iterator[os.DirEntry[str]], str, int]] = [(iter(top), path, 1)]
    while stack:
        children, directory, depth = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        entry = _entry(os.path.join(directory, child.name), child)
        if entry is None:
            continue  # vanished while we were listing
        if len(entries) >= max_entries:
            return entries, True
        entries.append(entry)
        if entry.is_dir and (max_depth <= 0 or depth < max_depth):
            try:
                below = _sorted_children(child.path, include_hidden)
            except OSError:
                below = []
            stack.append((iter(below), entry.path, depth + 1))
    return entries, False


def _stat_existing(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"The path {path} does not exist.") from None


def _sorted_children(directory: str, include_hidden: bool) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        children = [c for c in scan if include_hidden or not c.name.startswith(".")]
    return sorted(children, key=lambda c: c.name)


def _entry(path: str, child: os.DirEntry[str]) -> Entry | None:
    try:
        info = child.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    is_dir = stat.S_ISDIR(info.st_mode)
    return Entry(path, is_dir, 0 if is_dir else info.st_size, stat.S_IMODE(info.st_mode))
