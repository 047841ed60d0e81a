"""THE reader of append-only JSON Lines files whose last line a crash may have torn.

Trajectories, `batch`'s results.jsonl and `eval`'s samples.jsonl are written a line at a
time, and a process killed mid-write leaves a last line without its newline. Every reader of
such a file follows the same rules, implemented once here:

- A line that ends in a newline is whole: if it does not decode, the file is damaged and
  reading it is an error (BadLineError), never silently skipped.
- The bytes after the last newline are the tail. A tail that decodes is a whole record that
  only lost its newline; one that does not (cut inside a record, inside a multi-byte
  character, or binary garbage) is torn: readers skip it, and `mend_torn_tail` cuts it off
  so that the next append starts on a line of its own.
- Blank lines are ignored.

A "decode" function turns one line's bytes into an item and raises ValueError (TypeError,
AttributeError, KeyError also count) for a line that is not one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from sandfleet.errors import SandfleetError

T = TypeVar("T")

CHUNK_BYTES = 64 * 1024
"""Bytes read per step, forward when reading, backward when looking for the last newline."""

NOT_A_LINE = (ValueError, TypeError, AttributeError, KeyError, RecursionError)
"""What a decode function raises for a line that is not an item (json.loads raises
ValueError, UnicodeDecodeError included; a parse of the decoded value may raise the others)."""


class BadLineError(SandfleetError, ValueError):
    """A whole line (not the torn tail) that does not decode: the file is damaged."""

    def __init__(self, where: str, number: int, cause: BaseException) -> None:
        super().__init__(f"{where}:{number}: {cause}")
        self.number = number
        """The line's number, from 1."""
        self.cause = cause


def json_value(line: bytes) -> Any:
    """The JSON value of a line (strict UTF-8: other bytes make it no line)."""
    return json.loads(line.decode("utf-8"))


class LineSplitter:
    """Whole lines out of a byte stream fed chunk by chunk; memory holds at most the bytes
    of the one line not yet complete."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (blank ones too), without their newlines."""
        if b"\n" not in chunk:  # part of a long line: extend, do not re-copy what we hold
            self._pending += chunk
            return []
        head, *middle, tail = chunk.split(b"\n")
        first = bytes(self._pending) + head
        self._pending = bytearray(tail)
        return [first, *middle]

    @property
    def tail(self) -> bytes:
        """The bytes after the last newline fed: a record still being written, or torn."""
        return bytes(self._pending)


def decode_lines(
    chunks: Iterable[bytes], decode: Callable[[bytes], T] = json_value, *, where: str = "line"
) -> Iterator[T]:
    """The items of a JSON Lines byte stream, in order, following the module's rules: a
    whole line that does not decode raises BadLineError (`where` names the source in its
    message); the tail is yielded when it decodes and skipped when it is torn."""
    lines = LineSplitter()
    number = 0
    for chunk in chunks:
        for line in lines.feed(chunk):
            number += 1
            if not line.strip():
                continue
            try:
                item = decode(line)
            except NOT_A_LINE as error:
                raise BadLineError(where, number, error) from error
            yield item
    tail = lines.tail
    if tail.strip():
        try:
            item = decode(tail)
        except NOT_A_LINE:
            return  # torn by a crash mid-write
        yield item


def read_lines(path: Path, decode: Callable[[bytes], T] = json_value) -> Iterator[T]:
    """`decode_lines` of a file, read a chunk at a time (OSError when it cannot be read)."""
    with path.open("rb") as handle:
        yield from decode_lines(
            iter(lambda: handle.read(CHUNK_BYTES), b""), decode, where=str(path)
        )


def end_of_whole_lines(handle: BinaryIO, size: int) -> int:
    """The offset just past the last newline in the first `size` bytes of `handle` (0 when
    there is none): the end of the whole lines. Reads backwards a block at a time."""
    end = size
    while end > 0:
        start = max(0, end - CHUNK_BYTES)
        handle.seek(start)
        newline = handle.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def mend_torn_tail(path: Path, decode: Callable[[bytes], Any] = json_value) -> bool:
    """End the file on a line boundary before lines are appended to it: cut off a torn tail,
    or give a tail that decodes the newline it lost. True when the file changed.

    Only the tail is looked at (a damaged whole line stays for the reader to report).
    Raises OSError (FileNotFoundError included) when the file cannot be opened for writing.
    """
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = end_of_whole_lines(handle, size)
        if start == size:
            return False
        handle.seek(start)
        tail = handle.read()
        if not tail.strip():  # blanks after the last newline: nothing to mend
            return False
        try:
            decode(tail)
        except NOT_A_LINE:
            handle.truncate(start)
            return True
        handle.seek(size)
        handle.write(b"\n")
        return True
