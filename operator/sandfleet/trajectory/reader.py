"""Reading a trajectory back: its records in order, by the one torn-line reader's rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandfleet.trajectory.lines import mend_torn_tail, read_lines


def decode_record(line: bytes) -> dict[str, Any]:
    """One trajectory line as its record: a JSON object (ValueError for anything else)."""
    record = json.loads(line.decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError(f"a trajectory record must be a JSON object: {line[:80]!r}")
    return record


def read_trajectory(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a trajectory file in order.

    A last line cut short by a crash is skipped; a bad line anywhere else raises ValueError
    (sandfleet.trajectory.lines.BadLineError), a file that cannot be read OSError.
    """
    return read_lines(path, decode_record)


def mend_trajectory(path: Path) -> bool:
    """End the trajectory file on a line boundary before records are appended to it (see
    sandfleet.trajectory.lines.mend_torn_tail); True when the file changed."""
    return mend_torn_tail(path, decode_record)
