"""An append-only JSON Lines log that a rerun resumes from: one line per finished item,
fsynced as it is written, and a line torn by a crash cut off on the next load.

Shared by `sandfleet batch` (results.jsonl) and `sandfleet eval` (samples.jsonl).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from sandfleet.errors import SandfleetError
from sandfleet.trajectory.lines import BadLineError, json_value, mend_torn_tail, read_lines

T = TypeVar("T")


class JsonLinesLog(Generic[T]):
    """Subclasses say how a line becomes an item (`parse`) and back (`record`), what a line
    is called in an error (`what`) and which error they raise (`error`)."""

    what: ClassVar[str] = "a record"
    error: ClassVar[type[SandfleetError]] = SandfleetError

    def __init__(self, path: Path) -> None:
        self.path = path

    def parse(self, record: Any) -> T:
        raise NotImplementedError

    def record(self, item: T) -> dict[str, Any]:
        raise NotImplementedError

    def load(self) -> list[T]:
        """Every recorded item, oldest first. A torn last line (the process died while writing
        it) is cut off the file so the next append starts on a clean line; a bad line before
        it is an error, never silently dropped (sandfleet.trajectory.lines' rules)."""
        try:
            items = list(read_lines(self.path, self._decode))
            mend_torn_tail(self.path, self._decode)
        except FileNotFoundError:
            return []
        except BadLineError as error:
            raise self.error(
                f"{self.path}:{error.number}: not {self.what} ({error.cause})"
            ) from error
        except OSError as error:
            raise self.error(f"cannot read {self.path}: {error}") from error
        return items

    def _decode(self, line: bytes) -> T:
        return self.parse(json_value(line))

    def append(self, item: T) -> None:
        """Append one line and fsync it (blocking: call it from a worker thread)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(self.record(item), ensure_ascii=False, default=str) + "\n"
        # One write() of the whole line: concurrent appends never interleave inside a line.
        with self.path.open("a", encoding="utf-8") as log:
            log.write(line)
            log.flush()
            os.fsync(log.fileno())
