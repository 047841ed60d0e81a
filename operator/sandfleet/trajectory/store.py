"""Reading a trajectory store's directory: a session's runs, and a run's whole records.

The operator's HTTP API serves trajectories with this, and `sandfleet trajectory --store`
reads a store directory with it directly; the layout is sandfleet.api.trajectories', and
the operator's store adds the writing and pruning side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncGenerator
from pathlib import Path

from sandfleet.api.trajectories import (
    SUFFIX,
    TrajectoryKey,
    parse_reference,
    uid_of_file,
    validate_name,
    validate_namespace,
)
from sandfleet.trajectory.lines import end_of_whole_lines

CHUNK_BYTES = 256 * 1024
"""Bytes read per step when streaming a trajectory (memory per stream stays about this)."""


class TrajectoryDirectory:
    """A store's directory, read only: `<root>/<ns>/<name>/<uid>.jsonl`.

    Every path part is validated as a Kubernetes name before it touches the file system;
    scans run in worker threads.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def file_of(self, namespace: str, name: str, uid: str) -> Path:
        """The file of that run (it may not exist)."""
        return self.root / TrajectoryKey(namespace, name, uid).relative_path

    def resolve(self, reference: str) -> Path:
        """The file a status.trajectory reference names (it may not exist)."""
        return self.root / parse_reference(reference).relative_path

    async def latest(self, namespace: str, name: str) -> Path | None:
        """The session's most recently written trajectory, or None."""
        folder = self.root / validate_namespace(namespace) / validate_name(name)
        return await asyncio.to_thread(_newest_trajectory, folder)

    async def path(self, namespace: str, name: str, uid: str) -> Path | None:
        """The trajectory of that uid, or None when none is stored."""
        candidate = self.file_of(namespace, name, uid)
        return candidate if await asyncio.to_thread(candidate.is_file) else None


def _newest_trajectory(folder: Path) -> Path | None:
    newest: tuple[int, str] | None = None
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for entry in entries:
        if uid_of_file(entry.name) is None:
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            modified = entry.stat(follow_symlinks=False).st_mtime_ns
        except FileNotFoundError:  # pruned while we looked
            continue
        # Ties (coarse file-system clocks) are broken by name so the answer is stable.
        if newest is None or (modified, entry.name) > newest:
            newest = (modified, entry.name)
    return folder / newest[1] if newest else None


@dataclasses.dataclass(frozen=True, slots=True)
class TrajectorySnapshot:
    """A trajectory as of one moment: only whole records, so a reader never gets the half
    line the writer may be appending at that moment."""

    path: Path
    uid: str
    size: int
    """Bytes up to and including the last newline when the snapshot was taken."""
    modified: float
    """st_mtime of the file then (seconds since the epoch)."""


async def snapshot(path: Path) -> TrajectorySnapshot:
    """FileNotFoundError when the file is gone (pruned meanwhile)."""
    return await asyncio.to_thread(_snapshot, path)


def _snapshot(path: Path) -> TrajectorySnapshot:
    with path.open("rb") as handle:
        status = os.fstat(handle.fileno())
        end = end_of_whole_lines(handle, status.st_size)
    return TrajectorySnapshot(
        path=path, uid=path.name.removesuffix(SUFFIX), size=end, modified=status.st_mtime
    )


async def read_chunks(
    trajectory: TrajectorySnapshot, chunk_bytes: int = CHUNK_BYTES
) -> AsyncGenerator[bytes, None]:
    """The snapshot's bytes, chunk by chunk, each read in a worker thread.

    Ends early only if the file shrank (it never does: trajectories are append-only), so a
    caller that announced `size` as a Content-Length sees a short body as an error.
    """
    handle = await asyncio.to_thread(trajectory.path.open, "rb")
    try:
        remaining = trajectory.size
        while remaining > 0:
            chunk = await asyncio.to_thread(handle.read, min(chunk_bytes, remaining))
            if not chunk:
                return
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()
