"""Copying a sandbox's output tree to the host so that nothing in it can hurt the host.

The sandbox (and, in the worst case, its runtime) is not trusted: every listed path must
name a place strictly below the local folder (no absolute or `..` parts, no NUL), the
local side never follows or creates a symlink (each step is opened relative to its parent
with O_NOFOLLOW, files are created with O_EXCL), modes keep only the 0o777 bits, and a byte
and a file budget bound the copy while it streams. Whatever is not copied (a symlink, FIFO,
device or socket, which the runtime refuses to read; a path outside the folder; a file over
the budget; a per-file failure) is skipped and reported, and the rest is still copied.

Own code rather than a library: no maintained package does "untrusted remote listing into a
local dir_fd tree with budgets"; the parts are a few os.open calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandfleet.clients.runtime.client import FileEntry, RuntimeClient
from sandfleet.errors import SandboxLostError, SandfleetError
from sandfleet.logs import get_logger

log = get_logger(__name__)

DEFAULT_MAX_BYTES = 1024**3
"""Bytes copied back per run unless configured otherwise (1 GiB)."""
DEFAULT_MAX_FILES = 10_000
"""Files copied back per run unless configured otherwise."""
MAX_REPORTED_SKIPS = 100
"""Skipped entries listed in a report; `skipped_total` counts them all."""
_NAME_MAX = 255
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class CopyBackError(SandfleetError):
    """The local folder cannot take the copy at all (it exists and is not an empty folder)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CopyLimits:
    max_bytes: int = DEFAULT_MAX_BYTES
    """Bytes copied in all; checked while each file streams, not after."""
    max_files: int = DEFAULT_MAX_FILES
    """Regular files copied in all."""


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedEntry:
    path: str
    """The path as the runtime listed it."""
    reason: str


@dataclasses.dataclass(slots=True)
class CopyReport:
    """What a copy-back did; result.json carries `to_record()`."""

    files: list[str] = dataclasses.field(default_factory=list)
    """Copied files, relative to the local folder (POSIX form), in listing order."""
    bytes: int = 0
    skipped: list[SkippedEntry] = dataclasses.field(default_factory=list)
    """The first MAX_REPORTED_SKIPS entries not copied, with why."""
    skipped_total: int = 0
    truncated: bool = False
    """A budget or the runtime's listing cap left files behind."""

    def skip(self, path: str, reason: str) -> None:
        self.skipped_total += 1
        if len(self.skipped) < MAX_REPORTED_SKIPS:
            self.skipped.append(SkippedEntry(path, reason))
        log.debug("copy_back_skipped", path=path, reason=reason)

    def to_record(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "bytes": self.bytes,
            "skipped": [dataclasses.asdict(entry) for entry in self.skipped],
            "skipped_total": self.skipped_total,
            "truncated": self.truncated,
        }


def relative_parts(root: str, path: str) -> tuple[str, ...] | str:
    """The components of `path` below `root`, or why `path` may not be copied.

    Only a path that is `root` + "/" + plain names is accepted: no NUL, no empty, "." or ".."
    part, no name longer than the filesystem allows.
    """
    if "\x00" in path:
        return "the path contains a NUL byte"
    prefix = posixpath.normpath(root).rstrip("/") + "/"
    if not path.startswith(prefix):
        return "the path is outside the output directory"
    parts = tuple(path[len(prefix) :].split("/"))
    if any(part in ("", ".", "..") for part in parts):
        return "the path is not normalised (empty, '.' or '..' parts)"
    if any(len(part.encode("utf-8", "surrogateescape")) > _NAME_MAX for part in parts):
        return "a name in the path is too long"
    return parts


def current_umask() -> int:
    """This process's umask, read without changing it (os.umask would, for a moment, for
    every thread): /proc/self/status has it since Linux 4.7; 022 where it is not."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


class _LocalTree:
    """A fresh local folder written only through descriptors: nothing in it is followed."""

    def __init__(self, root: Path) -> None:
        try:
            os.mkdir(root, 0o755)
        except FileExistsError:
            # The caller cleared it; an empty real folder (not a link to one) is as fresh.
            if root.is_symlink() or not root.is_dir() or any(root.iterdir()):
                raise CopyBackError(f"{root} exists and is not an empty folder") from None
        self._root_fd = os.open(root, _DIR_FLAGS)

    def close(self) -> None:
        os.close(self._root_fd)

    def create(self, parts: Sequence[str]) -> tuple[int, int]:
        """(parent directory fd, new file fd) for `parts`; creates the directories on the way."""
        parent = os.dup(self._root_fd)
        try:
            for name in parts[:-1]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=parent)
                below = os.open(name, _DIR_FLAGS, dir_fd=parent)
                os.close(parent)
                parent = below
            return parent, os.open(parts[-1], _FILE_FLAGS, 0o600, dir_fd=parent)
        except BaseException:
            os.close(parent)
            raise


async def copy_tree(
    client: RuntimeClient,
    remote_dir: str,
    local_dir: Path,
    limits: CopyLimits | None = None,
) -> CopyReport:
    """Copy the regular files below `remote_dir` into the new folder `local_dir`.

    Raises SandboxLostError when the listing fails because the sandbox is gone, ToolError
    when the runtime refuses to list `remote_dir`, CopyBackError when `local_dir` exists and
    is not an empty folder. Everything else is reported, never raised.
    """
    link = await _linked_ancestor(client, remote_dir)
    if link is not None:
        # The shells could point it at files only the runtime may read; copy nothing.
        report = CopyReport(truncated=True)
        report.skip(remote_dir, f"{link} is a symbolic link or not a directory")
        await asyncio.to_thread(_LocalTree(local_dir).close)
        return report
    entries, cut = await client.list_tree(remote_dir)
    tree = await asyncio.to_thread(_LocalTree, local_dir)
    copier = _Copier(client, tree, remote_dir, limits or CopyLimits())
    try:
        for entry in entries:
            if not entry.is_dir and not await copier.copy(entry):
                break
    finally:
        tree.close()
    report = copier.report
    if cut:
        report.truncated = True
        report.skip(remote_dir, f"the runtime's listing stopped after {len(entries)} entries")
    return report


async def _linked_ancestor(client: RuntimeClient, remote_dir: str) -> str | None:
    """The first of `remote_dir` and its ancestors that is not a real directory, or None.

    The runtime lists a directory's children without following links (lstat), so a symlink
    shows as a non-directory entry in its parent's listing.
    """
    path = posixpath.normpath(remote_dir)
    ancestors: list[str] = []
    while path not in ("/", ""):
        ancestors.append(path)
        path = posixpath.dirname(path)
    for directory in reversed(ancestors):
        parent = posixpath.dirname(directory)
        children, _ = await client.list_tree(parent, max_depth=1)
        entry = next((e for e in children if e.path.rstrip("/") == directory), None)
        if entry is not None and not entry.is_dir:  # absent: a crowded parent cut the list
            return directory
    return None


class _Copier:
    def __init__(
        self, client: RuntimeClient, tree: _LocalTree, remote_dir: str, limits: CopyLimits
    ) -> None:
        self._client = client
        self._tree = tree
        self._remote_dir = remote_dir
        self._limits = limits
        self.report = CopyReport()

    def _refusal(self, entry: FileEntry) -> tuple[str, bool] | tuple[Sequence[str], None]:
        """(parts, None) for an entry to copy, else (reason, whether a limit said no)."""
        parts = relative_parts(self._remote_dir, entry.path)
        if isinstance(parts, str):
            return parts, False
        limits = self._limits
        if len(self.report.files) >= limits.max_files:
            return f"over the limit of {limits.max_files} files", True
        if entry.size > limits.max_bytes - self.report.bytes:
            return f"{entry.size} bytes; over the limit of {limits.max_bytes} bytes", True
        return parts, None

    async def copy(self, entry: FileEntry) -> bool:
        """Copy one listed file or report why not; False when the copy must stop."""
        report = self.report
        parts, limited = self._refusal(entry)
        if isinstance(parts, str):
            report.truncated = report.truncated or bool(limited)
            report.skip(entry.path, parts)
            return True
        budget = self._limits.max_bytes - report.bytes
        try:
            written = await _download(self._client, self._tree, entry, parts, budget)
        except SandboxLostError as error:
            report.truncated = True
            report.skip(entry.path, f"the sandbox was lost: {error}")
            return False
        except SandfleetError as error:  # the runtime refused: a symlink, FIFO, device, ...
            report.skip(entry.path, str(error))
        except OSError as error:  # the host side: disk full, a name clash, ...
            report.skip(entry.path, f"cannot write it here: {error.strerror or error}")
        else:
            if written is None:
                report.truncated = True
                report.skip(entry.path, f"grew over the limit of {self._limits.max_bytes} bytes")
            else:
                report.files.append("/".join(parts))
                report.bytes += written
        return True


async def _download(
    client: RuntimeClient, tree: _LocalTree, entry: FileEntry, parts: Sequence[str], budget: int
) -> int | None:
    """Stream one file into place; None (and no file) when it outgrows `budget`."""
    parent, fd = await asyncio.to_thread(tree.create, parts)
    written = 0
    complete = False
    try:
        async with contextlib.aclosing(client.download_chunks(entry.path)) as chunks:
            async for chunk in chunks:
                written += len(chunk)
                if written > budget:
                    return None
                await asyncio.to_thread(_write_all, fd, chunk)
        # Permission bits only: no setuid, setgid or sticky bit reaches the host; and, like
        # cp, no more than our umask allows (the CLI's 077 keeps outputs private).
        os.fchmod(fd, entry.mode & 0o777 & ~current_umask())
        complete = True
        return written
    finally:
        os.close(fd)
        if not complete:
            with contextlib.suppress(OSError):
                os.unlink(parts[-1], dir_fd=parent)
        os.close(parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
