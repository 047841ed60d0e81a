"""Writing a trajectory: JSON Lines, record by record as a run happens."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO


class TrajectoryWriter:
    """Appends one JSON object per line and flushes after each, so a crash of the process
    loses at most the record being written.

    Writes are synchronous on purpose: each is one small append into the page cache (a few
    microseconds), cheaper than a thread hop, and it keeps records in the order they
    happened. There is no fsync: surviving a machine crash is not the goal.

    Record kinds: sandfleet.trajectory.format.RECORD_KINDS, each documented in
    docs/trajectory-format.md. Every record carries "kind"; readers ignore kinds they do not know.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # backslashreplace: a lone surrogate from an endpoint lands inside a JSON string as
        # the escape \udXXX, which is valid JSON and reads back as the same string.
        # 0600: prompts and observations are the user's alone (the umask may narrow it more).
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._file: TextIO | None = open(  # noqa: SIM115 - closed by close()
            fd, "a", encoding="utf-8", errors="backslashreplace"
        )

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"trajectory {self.path} is closed")
        self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
