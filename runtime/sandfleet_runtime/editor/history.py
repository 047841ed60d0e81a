"""Undo history of the editor: per-file snapshot stacks, bounded per file and in total bytes."""

from __future__ import annotations

import dataclasses
import itertools
import logging

log = logging.getLogger(__name__)

DEFAULT_HISTORY_MAX_BYTES = 64 * 1024 * 1024
"""Snapshot bytes kept across all files; the oldest snapshots are dropped first."""


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A file as it was before one edit."""

    content: bytes | None
    """The previous bytes, or None when the edit created the file (undo deletes it)."""
    sequence: int
    """Global recording order; the smallest is the oldest snapshot overall."""

    @property
    def size(self) -> int:
        return 0 if self.content is None else len(self.content)


class EditHistory:
    """Undo stacks keyed by resolved path.

    A stack only ever loses its *oldest* entries, so an undo never skips an edit: it either
    restores the state right before the latest edit or reports that no history is left.
    """

    def __init__(self, *, depth: int, max_total_bytes: int = DEFAULT_HISTORY_MAX_BYTES) -> None:
        self._depth = depth
        self._max_total_bytes = max_total_bytes
        self._stacks: dict[str, list[Snapshot]] = {}
        self._total_bytes = 0
        self._sequence = itertools.count()

    @property
    def total_bytes(self) -> int:
        return self._total_bytes

    def record(self, key: str, content: bytes | None) -> None:
        """Remembers `content` as the state of `key` before the edit that is about to happen."""
        snapshot = Snapshot(content, next(self._sequence))
        if self._depth <= 0 or snapshot.size > self._max_total_bytes:
            # Keeping older snapshots without this one would let undo skip this edit.
            self.forget(key)
            log.debug("edit_history_not_recorded", extra={"path": key, "bytes": snapshot.size})
            return
        stack = self._stacks.setdefault(key, [])
        stack.append(snapshot)
        self._total_bytes += snapshot.size
        if len(stack) > self._depth:
            self._total_bytes -= stack.pop(0).size
        while self._total_bytes > self._max_total_bytes:
            self._drop_oldest()

    def pop(self, key: str) -> Snapshot | None:
        """Takes the latest snapshot of `key`, or None when there is no history."""
        stack = self._stacks.get(key)
        if not stack:
            return None
        snapshot = stack.pop()
        self._total_bytes -= snapshot.size
        if not stack:
            del self._stacks[key]
        return snapshot

    def push_back(self, key: str, snapshot: Snapshot) -> None:
        """Returns a popped snapshot to its stack (the undo that popped it failed)."""
        self._stacks.setdefault(key, []).append(snapshot)
        self._total_bytes += snapshot.size

    def clear(self) -> None:
        """Forgets every file's history (Reset: the next rollout starts without undo)."""
        self._stacks.clear()
        self._total_bytes = 0

    def forget(self, key: str) -> None:
        for snapshot in self._stacks.pop(key, ()):
            self._total_bytes -= snapshot.size

    def _drop_oldest(self) -> None:
        # Linear in the number of edited files; it only runs when the byte budget overflows.
        key = min(self._stacks, key=lambda k: self._stacks[k][0].sequence)
        stack = self._stacks[key]
        self._total_bytes -= stack.pop(0).size
        if not stack:
            del self._stacks[key]
        log.debug("edit_history_dropped", extra={"path": key})
