"""Where managed sessions' trajectories outlive their pods: one JSON Lines file per session run.

The layout and names are sandfleet.api.trajectories', the reading side (shared with
`sandfleet trajectory --store`) is sandfleet.trajectory.store; this module adds what only
the operator does: choosing the file a run writes, and pruning old ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Protocol

from sandfleet.api.trajectories import (
    TrajectoryKey,
    is_valid,
    uid_of_file,
    validate_name,
    validate_namespace,
)
from sandfleet.logs import get_logger
from sandfleet.trajectory.store import TrajectoryDirectory

log = get_logger(__name__)


class TrajectoryStore(Protocol):
    """Where the operator writes trajectories and its HTTP API reads them."""

    def writer_path(self, namespace: str, name: str, uid: str) -> Path:
        """The file to open a TrajectoryWriter on (it creates the folders)."""
        ...

    def reference(self, namespace: str, name: str, uid: str) -> str:
        """What the operator puts into status.trajectory."""
        ...

    async def latest(self, namespace: str, name: str) -> Path | None:
        """The session's most recently written trajectory, or None."""
        ...

    async def path(self, namespace: str, name: str, uid: str) -> Path | None:
        """The trajectory of that uid, or None when none is stored."""
        ...

    def writing(self, path: Path) -> contextlib.AbstractContextManager[None]:
        """Marks `path` as appended to for the block: prune never takes it meanwhile."""
        ...

    async def prune(self, older_than_s: float, *, keep: Collection[Path] = ()) -> int:
        """Delete trajectories last written longer ago than that, except those held open
        (see `writing`) and those in `keep`; returns how many."""
        ...


class DirectoryTrajectoryStore(TrajectoryDirectory):
    """The default store: files under a directory (a volume), `<root>/<ns>/<name>/<uid>.jsonl`.

    Every path part is validated as a Kubernetes name before it touches the file system.
    Scans and deletions run in worker threads; only prune's removal of emptied folders runs
    on the event loop (see prune).
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._writing: set[Path] = set()
        """Trajectory files a running loop appends to (see `writing`)."""

    @contextlib.contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        self._writing.add(path)
        try:
            yield
        finally:
            self._writing.discard(path)

    def writer_path(self, namespace: str, name: str, uid: str) -> Path:
        """The file for that run. Open the TrajectoryWriter on the event loop's thread (its
        constructor creates the folders and the file in one synchronous step), so prune,
        which removes emptied folders on that thread too, can never remove a folder between
        the two."""
        return self.file_of(namespace, name, uid)

    def reference(self, namespace: str, name: str, uid: str) -> str:
        return TrajectoryKey(namespace, name, uid).reference

    async def prune(self, older_than_s: float, *, keep: Collection[Path] = ()) -> int:
        """Delete every trajectory whose last write is older than `older_than_s`, then the
        folders left empty. Files held open (`writing`) and those in `keep` stay: a session
        waiting on a long tool call or model reply writes nothing meanwhile, and a file
        deleted under an open writer loses every record written after.

        Folders are removed here on the event loop's thread: rmdir refuses a folder that is
        not empty, and the writer creates folder and file in one synchronous step on this
        thread too, so a new trajectory never loses its folder between the two.
        """
        cutoff = time.time() - older_than_s
        deleted, emptied = await asyncio.to_thread(
            _delete_older_than, self.root, cutoff, frozenset(keep) | self._writing
        )
        removed_folders = 0
        for folder in emptied:  # session folders first, then their namespace folders
            try:
                folder.rmdir()
                removed_folders += 1
            except OSError:  # a trajectory arrived meanwhile, or already gone
                continue
        if deleted or removed_folders:
            log.info(
                "trajectories_pruned",
                root=str(self.root),
                files=deleted,
                folders=removed_folders,
                older_than_s=older_than_s,
            )
        return deleted


def _subfolders(folder: Path) -> list[Path]:
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(entry.path) for entry in entries if entry.is_dir(follow_symlinks=False)]


def _delete_older_than(root: Path, cutoff: float, keep: frozenset[Path]) -> tuple[int, list[Path]]:
    """Unlink old trajectories; returns their count and the folders now empty, deepest first."""
    deleted = 0
    emptied_sessions: list[Path] = []
    emptied_namespaces: list[Path] = []
    for namespace_folder in _subfolders(root):
        if not is_valid(namespace_folder.name, validate_namespace):
            continue
        session_folders = [
            folder
            for folder in _subfolders(namespace_folder)
            if is_valid(folder.name, validate_name)
        ]
        left_in_namespace = False
        for session_folder in session_folders:
            count, empty = _delete_in_session_folder(session_folder, cutoff, keep)
            deleted += count
            if empty:
                emptied_sessions.append(session_folder)
            else:
                left_in_namespace = True
        if not left_in_namespace and len(session_folders) == _entry_count(namespace_folder):
            emptied_namespaces.append(namespace_folder)
    return deleted, emptied_sessions + emptied_namespaces


def _delete_in_session_folder(
    folder: Path, cutoff: float, keep: frozenset[Path]
) -> tuple[int, bool]:
    deleted = 0
    remaining = 0
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return 0, False  # gone meanwhile: nothing to remove
    for entry in entries:
        try:
            old = (
                uid_of_file(entry.name) is not None
                and Path(entry.path) not in keep
                and entry.is_file(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < cutoff
            )
            if old:
                os.unlink(entry.path)
                deleted += 1
            else:
                remaining += 1
        except FileNotFoundError:
            continue
    return deleted, remaining == 0


def _entry_count(folder: Path) -> int:
    try:
        return len(os.listdir(folder))
    except FileNotFoundError:
        return 0
