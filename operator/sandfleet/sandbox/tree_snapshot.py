"""TreeSnapshot: a sandbox's working tree as a tar archive held in a private temporary file.

A file, not bytes in memory: a working tree may be hundreds of MB, a trainer may hold
several snapshots at once, and `fork(n)` streams one snapshot into n sandboxes at the same
time, each restore reading the file through its own handle. The file lives in a private
directory (mode 0700) and is removed by `close()`, by leaving a `with` block, or when the
snapshot is garbage-collected.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["TreeSnapshot"]


class TreeSnapshot:
    """One working tree as a tar archive (`path`, `size` bytes); restore it with
    `Sandbox.restore(snapshot)` into this or any other sandbox of the same layout."""

    def __init__(self, directory: Path, size: int) -> None:
        self._directory = directory
        self.path = directory / "tree.tar"
        """The archive (POSIX tar, PAX format, paths relative to the working directory)."""
        self.size = size
        """The archive's size in bytes."""
        self._cleanup = weakref.finalize(self, shutil.rmtree, directory, True)

    @staticmethod
    def new_directory() -> Path:
        """A private directory for one snapshot's archive."""
        return Path(tempfile.mkdtemp(prefix="sandfleet-snapshot-"))

    @property
    def closed(self) -> bool:
        return not self._cleanup.alive

    def close(self) -> None:
        """Remove the archive; a second call does nothing."""
        self._cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else str(self.path)
        return f"TreeSnapshot({state}, {self.size} bytes)"
