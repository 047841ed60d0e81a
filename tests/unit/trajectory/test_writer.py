"""Trajectory files: one flushed JSON line per record, readable after a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandfleet.trajectory.reader import read_trajectory
from sandfleet.trajectory.writer import TrajectoryWriter


def test_each_record_is_on_disk_as_soon_as_it_is_written(tmp_path: Path) -> None:
    path = tmp_path / "t" / "trajectory.jsonl"
    writer = TrajectoryWriter(path)
    writer.write({"kind": "meta", "task_id": "a"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"kind": "meta", "task_id": "a"}
    writer.write({"kind": "message", "role": "user", "content": "ünïcode"})
    assert [r["kind"] for r in read_trajectory(path)] == ["meta", "message"]
    writer.close()
    assert writer.closed
    with pytest.raises(ValueError, match="closed"):
        writer.write({"kind": "late"})


def test_a_last_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"kind": "meta"}\n{"kind": "message", "con', encoding="utf-8")
    assert list(read_trajectory(path)) == [{"kind": "meta"}]


def test_a_bad_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"kind": "meta"}\nnot json\n{"kind": "result"}\n', encoding="utf-8")
    with pytest.raises(ValueError):
        list(read_trajectory(path))
