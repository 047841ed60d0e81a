"""Trajectories as JSON Lines, written record by record as a run happens, and read back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

FORMAT_VERSION = 1
"""Written into the meta record; bump it when a record kind changes incompatibly (new keys
are compatible: readers test for them)."""

TOKENS_KIND = "tokens"
"""The record of one model turn's tokens, in runs that record them (meta "record_tokens":
true): {"kind": "tokens", "turn", "prompt_ids", "completion_ids", "logprobs", "source",
"unavailable"}. The ids and logprobs are the endpoint's own, never re-tokenised: a part it did
not return is null, and "unavailable" maps that part's name to why; "source" maps each part
present to the response field it came from. Runs that do not record tokens write no such
record and no "record_tokens" key."""


class TrajectoryWriter:
    """Appends one JSON object per line and flushes after each, so a crash of the process
    loses at most the record being written.

    Writes are synchronous on purpose: each is one small append into the page cache (a few
    microseconds), cheaper than a thread hop, and it keeps records in the order they
    happened. There is no fsync: surviving a machine crash is not the goal.

    Record kinds: meta, message, tool_call, observation, usage, tokens (TOKENS_KIND), notice,
    result (see INTERFACES.md). Every record carries "kind"; readers ignore kinds they do not know.
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


def read_trajectory(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a trajectory file in order.

    A last line cut short by a crash is skipped; a bad line anywhere else is an error.
    """
    with path.open(encoding="utf-8") as handle:
        pending: str | None = None
        for line in handle:
            if pending is not None:
                yield _decode(pending, path)
            pending = line if line.strip() else None
        if pending is not None:
            if not pending.endswith("\n"):
                try:
                    yield _decode(pending, path)
                except ValueError:
                    return
            else:
                yield _decode(pending, path)


def _decode(line: str, path: Path) -> dict[str, Any]:
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a trajectory record must be a JSON object: {line[:80]!r}")
    return record
