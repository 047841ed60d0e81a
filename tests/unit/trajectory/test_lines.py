"""The one torn-line JSON Lines reader: whole lines, a torn tail, garbage, chunk borders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandfleet.json_lines import JsonLinesLog
from sandfleet.trajectory import lines
from sandfleet.trajectory.lines import (
    BadLineError,
    LineSplitter,
    decode_lines,
    end_of_whole_lines,
    mend_torn_tail,
    read_lines,
)
from sandfleet.trajectory.reader import read_trajectory
from sandfleet.trajectory.store import _snapshot

WHOLE = b'{"n": 1}\n{"n": 2}\n'
GARBAGE = bytes(range(256)) * 3


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_a_record_split_over_chunks_reads_the_same_as_one_chunk(size: int) -> None:
    data = WHOLE + b"\n" + '{"text": "ünïcode € 𝄞"}\n'.encode()
    items = list(decode_lines(_chunks(data, size)))
    assert items == [{"n": 1}, {"n": 2}, {"text": "ünïcode € 𝄞"}]


@pytest.mark.parametrize(
    "tail",
    [
        b'{"n": 3, "te',  # cut inside a record
        '{"n": "€'.encode()[:-1],  # cut inside a multi-byte character
        GARBAGE.replace(b"\n", b""),  # binary garbage
    ],
)
def test_a_torn_tail_is_skipped_and_mending_cuts_it_off(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(WHOLE + tail)
    assert list(read_lines(path)) == [{"n": 1}, {"n": 2}]
    assert mend_torn_tail(path) is True
    assert path.read_bytes() == WHOLE
    assert mend_torn_tail(path) is False  # mended once, nothing left to do


def test_a_whole_tail_without_its_newline_is_read_and_gets_the_newline(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(WHOLE + b'{"n": 3}')
    assert list(read_lines(path)) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert mend_torn_tail(path) is True
    assert path.read_bytes() == WHOLE + b'{"n": 3}\n'


@pytest.mark.parametrize("bad", [b"not json", GARBAGE.replace(b"\n", b""), b'{"n": "\xff"}'])
def test_a_bad_whole_line_is_an_error_naming_its_line(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"n": 1}\n\n' + bad + b'\n{"n": 4}\n')
    with pytest.raises(BadLineError) as caught:
        list(read_lines(path))
    assert caught.value.number == 3  # the blank line counts
    assert str(caught.value).startswith(f"{path}:3: ")
    assert mend_torn_tail(path) is False  # mending leaves whole lines for the reader to report


def test_the_decoder_decides_what_a_line_is(tmp_path: Path) -> None:
    path = tmp_path / "trajectory.jsonl"
    path.write_bytes(b'{"kind": "meta"}\n[1, 2]')  # a JSON tail that is not a record
    assert list(read_trajectory(path)) == [{"kind": "meta"}]
    path.write_bytes(b'[1, 2]\n{"kind": "meta"}\n')
    with pytest.raises(ValueError, match="JSON object"):
        list(read_trajectory(path))


def test_the_splitter_keeps_the_unfinished_line_as_its_tail() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a"') == []
    assert splitter.feed(b": 1}\n\n{") == [b'{"a": 1}', b""]
    assert splitter.tail == b"{"


def test_the_end_of_whole_lines_is_found_across_read_blocks(tmp_path: Path) -> None:
    record = json.dumps({"blob": "x" * (lines.CHUNK_BYTES * 2)}).encode() + b"\n"
    path = tmp_path / "trajectory.jsonl"
    path.write_bytes(record + b"y" * (lines.CHUNK_BYTES + 5))
    with path.open("rb") as handle:
        assert end_of_whole_lines(handle, path.stat().st_size) == len(record)
        assert end_of_whole_lines(handle, len(record) - 1) == 0
    assert _snapshot(path).size == len(record)  # the store serves whole lines only


class _Numbers(JsonLinesLog[int]):
    what = "a number record"

    def parse(self, record: Any) -> int:
        return int(record["n"])

    def record(self, item: int) -> dict[str, int]:
        return {"n": item}


def test_the_append_only_log_uses_the_same_rules(tmp_path: Path) -> None:
    log = _Numbers(tmp_path / "results.jsonl")
    assert log.load() == []  # no file yet
    log.path.write_bytes(WHOLE + b'{"n": 3, "')
    assert log.load() == [1, 2]
    log.append(3)
    assert log.load() == [1, 2, 3]
    log.path.write_bytes(b'{"n": 1}\n{"m": 2}\n')  # a whole line that is no record
    with pytest.raises(Exception, match=r"results.jsonl:2: not a number record"):
        log.load()
