"""The pristine working tree: captured in memory at start, put back by Reset in milliseconds.

The capture holds every regular file's bytes, every directory and symlink, and each entry's
mode, in the runtime's own memory: a rollout cannot tamper with it, and a reset needs no
disk read of a second copy. It is bounded (`max_bytes`, file content summed): an image
whose working tree is larger gets no baseline, and Reset says so instead of doing half a
job. FIFOs, sockets and devices are not captured (a reset removes them).

Change detection uses what a process cannot forge: the inode number and the ctime, which
the kernel sets on every write, chmod, rename or link change and which no syscall can set
back. After a reset the restored entries' new inode/ctime are recorded, so the next reset
again only touches what the rollout changed. Hard links come back as separate files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import stat
from pathlib import Path

from sandfleet_runtime.errors import FailedPreconditionError

__all__ = [
    "DEFAULT_BASELINE_MAX_BYTES",
    "Baseline",
    "BaselineUnavailableError",
    "TreeRepair",
    "walk_tree",
]

log = logging.getLogger(__name__)

DEFAULT_BASELINE_MAX_BYTES = 64 * 1024 * 1024
"""File content a baseline holds at most (an image's workdir is usually a few MB)."""


MAX_BASELINE_ENTRIES = 200_000
"""Paths a baseline holds at most: bounds the walk at start for a huge working tree."""


class BaselineUnavailableError(FailedPreconditionError):
    """No baseline: the working tree is too large or unreadable, or Reset is disabled."""


@dataclasses.dataclass(slots=True)
class _Entry:
    kind: int
    """stat.S_IFREG, S_IFDIR or S_IFLNK."""
    mode: int
    """Permission bits (S_IMODE)."""
    content: bytes = b""
    """File bytes, or the link target (os.fsencode) for a symlink."""
    mtime_ns: int = 0
    ino: int = 0
    ctime_ns: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class TreeRepair:
    """What one restore changed."""

    removed: int
    restored: int


def walk_tree(root: Path) -> list[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything below root, parents before children.

    Like `find -xdev`: a file system mounted inside the tree (a volume, /proc when the tree
    is /) is neither listed nor entered, so nothing here captures, archives or deletes it.
    """
    device = root.stat().st_dev
    found: list[tuple[str, os.stat_result]] = []
    pending = [""]
    while pending:
        relative = pending.pop()
        directory = root / relative if relative else root
        try:
            listing = _scandir(directory)
        except FileNotFoundError:  # removed since it was listed (SnapshotTree runs live)
            continue
        for entry in listing:
            path = f"{relative}/{entry.name}" if relative else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_dev != device:
                continue
            found.append((path, info))
            if stat.S_ISDIR(info.st_mode):
                pending.append(path)
    return found


def _scandir(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except PermissionError:  # a rollout chmod'ed it to 0: the runtime owns the tree
        os.chmod(directory, 0o700)
        with os.scandir(directory) as entries:
            return list(entries)


def _make_writable(function: object, path: str, _exc: object) -> None:
    """rmtree error handler: a rollout may have chmod'ed a directory to 0; fix it and retry."""
    parent = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.chmod(parent, 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=_make_writable)
        else:
            os.unlink(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=_make_writable)
    else:
        try:
            path.unlink()
        except PermissionError:
            os.chmod(path.parent, 0o700)
            path.unlink()


class Baseline:
    """The working tree as captured; `restore()` makes the tree match it again."""

    def __init__(self, root: Path, entries: dict[str, _Entry], size: int) -> None:
        self.root = root
        self._entries = entries
        self.size = size
        """Bytes of file content held."""

    @property
    def paths(self) -> int:
        return len(self._entries)

    @classmethod
    def capture(cls, root: Path, *, max_bytes: int = DEFAULT_BASELINE_MAX_BYTES) -> Baseline:
        """Reads the tree below `root`; BaselineUnavailableError past `max_bytes` of content."""
        if max_bytes <= 0:
            raise BaselineUnavailableError(
                "Reset is disabled on this runtime (--reset-baseline-max-bytes 0)."
            )
        if root.resolve() == Path("/"):
            raise BaselineUnavailableError(
                "The working directory is /; reset needs a dedicated working directory (--workdir)."
            )
        try:
            return cls._capture(root, max_bytes)
        except OSError as error:
            raise BaselineUnavailableError(
                f"The working tree {root} could not be captured for Reset: {error}"
            ) from None

    @classmethod
    def _capture(cls, root: Path, max_bytes: int) -> Baseline:
        entries: dict[str, _Entry] = {}
        total = 0
        for relative, info in walk_tree(root):
            if len(entries) >= MAX_BASELINE_ENTRIES:
                raise BaselineUnavailableError(
                    f"The working tree {root} holds more than {MAX_BASELINE_ENTRIES} paths,"
                    " more than a reset baseline keeps; reset is unavailable."
                )
            kind = stat.S_IFMT(info.st_mode)
            entry = _Entry(kind, stat.S_IMODE(info.st_mode), mtime_ns=info.st_mtime_ns)
            if kind == stat.S_IFREG:
                total += info.st_size
                if total > max_bytes:
                    raise BaselineUnavailableError(
                        f"The working tree {root} holds more than {max_bytes} bytes of files,"
                        " more than a reset baseline keeps; reset is unavailable. Use a"
                        " smaller working directory or raise --reset-baseline-max-bytes."
                    )
                entry.content = (root / relative).read_bytes()
            elif kind == stat.S_IFLNK:
                entry.content = os.fsencode(os.readlink(root / relative))
            elif kind != stat.S_IFDIR:
                log.info("baseline_skipped_special_file", extra={"path": relative})
                continue
            entry.ino, entry.ctime_ns = info.st_ino, info.st_ctime_ns
            entries[relative] = entry
        return cls(root, entries, total)

    def restore(self) -> TreeRepair:
        """Removes what the baseline lacks and rewrites what differs. Blocking (worker thread)."""
        removed = 0
        seen: dict[str, os.stat_result] = {}
        for relative, info in walk_tree(self.root):
            entry = self._entries.get(relative)
            if entry is None or entry.kind != stat.S_IFMT(info.st_mode):
                if self._inside_removed(relative, seen):
                    continue
                _remove(self.root / relative)
                removed += 1
                seen[relative] = info  # marks the subtree as gone
        restored = 0
        for relative, entry in self._entries.items():  # parents come before their children
            if self._repair(relative, entry):
                restored += 1
        if removed or restored:
            log.info("baseline_restored", extra={"removed": removed, "restored": restored})
        return TreeRepair(removed=removed, restored=restored)

    @staticmethod
    def _inside_removed(relative: str, removed: dict[str, os.stat_result]) -> bool:
        parent = os.path.dirname(relative)
        while parent:
            if parent in removed:
                return True
            parent = os.path.dirname(parent)
        return False

    def _repair(self, relative: str, entry: _Entry) -> bool:
        """Puts one entry back unless it is unchanged; True when something was written."""
        path = self.root / relative
        try:
            info: os.stat_result | None = path.lstat()
        except FileNotFoundError:
            info = None
        if info is not None and _unchanged(entry, info):
            return False
        if entry.kind == stat.S_IFDIR:
            if info is None:
                path.mkdir()
            os.chmod(path, entry.mode)
        elif entry.kind == stat.S_IFLNK:
            if info is not None:
                path.unlink()
            os.symlink(os.fsdecode(entry.content), path)
        else:
            if info is not None:
                _remove(path)  # a fresh inode: a process holding the old one open cannot write here
            _write_file(path, entry)
        after = path.lstat()
        entry.ino, entry.ctime_ns = after.st_ino, after.st_ctime_ns
        return True


def _unchanged(entry: _Entry, info: os.stat_result) -> bool:
    if stat.S_IFMT(info.st_mode) != entry.kind:
        return False
    if entry.kind == stat.S_IFDIR:
        # A directory's ctime moves with every entry added or removed below it; only its
        # mode is its own (its entries are repaired one by one).
        return stat.S_IMODE(info.st_mode) == entry.mode
    return info.st_ino == entry.ino and info.st_ctime_ns == entry.ctime_ns


def _write_file(path: Path, entry: _Entry) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(entry.content)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, entry.mode)
    finally:
        os.close(fd)
    os.utime(path, ns=(entry.mtime_ns, entry.mtime_ns))
