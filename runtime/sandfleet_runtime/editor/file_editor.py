"""The `str_replace_editor` tool on real files: view, create, str_replace, insert, undo_edit.

Texts and rules follow Anthropic's reference editor (as adopted by SWE-agent and OpenHands),
which models are trained on, with these deliberate differences:

* Files are edited byte-exactly: no `expandtabs`, no added trailing newline, file mode,
  owner and line endings kept. `view` shows tabs as tabs, so old_str can reproduce them.
* Line numbers follow `cat -n`: a final newline does not add an empty last line.
* `insert` treats new_str as whole lines: a missing final newline is added, so inserted text
  never merges with the next line. Inserting after the last line of a file that does not end
  in a newline adds the separator before new_str instead, and the file keeps ending without one.
* `undo_edit` after `create` deletes the file.
* A file over `max_file_bytes` is never loaded: `view` with `view_range` streams it, every
  other command refuses it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from sandfleet_runtime.editor import disk, encoding
from sandfleet_runtime.editor.history import DEFAULT_HISTORY_MAX_BYTES, EditHistory
from sandfleet_runtime.editor.text import (
    SNIPPET_LINES,
    Text,
    abbreviate,
    cat_n,
    clip,
    for_model,
    line_numbers_of,
    snippet,
    split_lines,
)
from sandfleet_runtime.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from sandfleet_runtime.files import list_tree

MAX_LISTING_ENTRIES = 1_000
"""Entries a directory `view` shows before it stops with a note."""

_MAX_REPORTED_OCCURRENCES = 200
_EDITED = "Review the changes and make sure they are as expected. Edit the file again if necessary."
_INSERTED = (
    "Review the changes and make sure they are as expected (correct indentation, no duplicate "
    "lines, etc). Edit the file again if necessary."
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Loaded:
    real: str
    """Symlinks resolved: what is written and what keys the undo history."""
    info: os.stat_result
    data: bytes
    text: Text


class FileEditor:
    """Implements the editor commands; each returns the model-facing text or raises a
    RuntimeToolError whose message tells the model what to do instead. Not thread-safe."""

    def __init__(
        self,
        *,
        max_file_bytes: int,
        max_output_chars: int = 16_000,
        history_depth: int = 10,
        history_max_bytes: int = DEFAULT_HISTORY_MAX_BYTES,
        cwd: Path | None = None,
    ) -> None:
        self._max_file_bytes = max_file_bytes
        self._max_output_chars = max_output_chars
        self._history = EditHistory(depth=history_depth, max_total_bytes=history_max_bytes)
        # Only used to suggest an absolute path when the model gives a relative one.
        self._cwd = Path.cwd() if cwd is None else cwd

    def clear_history(self) -> None:
        """Forgets all undo history (Reset)."""
        self._history.clear()

    def view(self, path: str, view_range: Sequence[int] | None = None) -> str:
        """A file `cat -n`-style (optionally lines [start, end], end -1 = to the end), or a
        directory listed two levels deep. An empty view_range means none."""
        real = self._resolve(path)
        info = disk.stat_existing(path, real)
        if stat.S_ISDIR(info.st_mode):
            if view_range:
                raise InvalidArgumentError(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                )
            return self._view_directory(path)
        disk.require_regular_file(path, info)
        line_range = _parse_view_range(view_range) if view_range else None
        if info.st_size > self._max_file_bytes:
            if line_range is None:
                raise FailedPreconditionError(
                    f"The file {path} is too large to show at once ({info.st_size} bytes; the "
                    f"limit is {self._max_file_bytes}). View part of it with `view_range` (e.g. "
                    "[1, 100]), or find the lines you need with `grep -n` in `execute_bash`."
                )
            return self._view_large_file(path, real, line_range)
        text = Text.decode(disk.read_bytes(path, real), path)
        if line_range is None:
            return self._whole_file(path, text)
        lines = split_lines(text.content)
        start, end = line_range
        _check_view_range(path, line_range, len(lines))
        shown = lines[start - 1 :] if end == -1 else lines[start - 1 : end]
        return _noted(
            cat_n(shown, path, first_line=start, limit=self._max_output_chars), text, path
        )

    def create(self, path: str, file_text: str) -> str:
        """Writes a new file (parents created, mode 0o644) exactly as given."""
        real = self._resolve(path)
        if path.endswith("/"):
            raise InvalidArgumentError(
                f"The path {path} ends with `/`; `create` needs the path of a file."
            )
        if os.path.lexists(path):
            if os.path.isdir(path):
                raise disk.is_a_directory(path)
            raise _already_exists(path)
        data = _encode(file_text)
        self._check_size(path, len(data))
        try:
            disk.create_new(path, real, data)
        except FileExistsError:
            raise _already_exists(path) from None
        self._history.record(real, None)
        return f"File created successfully at: {path}"

    def str_replace(self, path: str, old_str: str, new_str: str | None) -> str:
        """Replaces the only occurrence of old_str; new_str None (or empty) deletes it."""
        loaded = self._load(path)
        if not old_str:
            raise InvalidArgumentError(
                "Parameter `old_str` must not be empty: copy the exact text to replace from the "
                "file (see `view`). To add text without replacing any, use `insert`."
            )
        new_str = new_str or ""
        if new_str == old_str:
            raise InvalidArgumentError(
                "No replacement was performed: `new_str` is identical to `old_str`, so the file "
                "would not change."
            )
        text = loaded.text
        old, new = text.adopt(old_str), text.adopt(new_str)
        content = text.content
        spans = _occurrences(content, old, mixed_newlines=text.mixed_newlines)
        if not spans:
            hint = encoding.escaped_bytes_hint(text.decoded, old_str)
            if "\t" in content and "\t" not in old:
                hint += (
                    " The file contains tab characters: old_str must reproduce them exactly "
                    "(spaces do not match tabs)."
                )
            raise FailedPreconditionError(
                f"No replacement was performed, old_str `{abbreviate(old_str)}` did not appear "
                f"verbatim in {path}.{hint}"
            )
        if len(spans) > 1:
            lines = line_numbers_of(content, [start for start, _end in spans])
            more = " and more" if len(spans) >= _MAX_REPORTED_OCCURRENCES else ""
            raise FailedPreconditionError(
                f"No replacement was performed. Multiple occurrences of old_str "
                f"`{abbreviate(old_str)}` in lines {lines}{more}. Please ensure it is unique"
            )
        at, end = spans[0]
        if text.mixed_newlines:
            new = _with_newlines(new, _ending_near(content, at, end))
        new_content = content[:at] + new + content[end:]
        self._store(path, loaded, text.encode(new_content, path))
        first_edited = content.count("\n", 0, at)
        # A final newline in new_str ends its last line rather than starting another one.
        last_edited = first_edited + max(0, new.count("\n") - new.endswith("\n"))
        shown = snippet(
            new_content,
            first_edited - SNIPPET_LINES,
            last_edited + SNIPPET_LINES,
            f"a snippet of {path}",
            self._max_output_chars,
        )
        return f"The file {path} has been edited. {shown}{_EDITED}"

    def insert(self, path: str, insert_line: int, new_str: str) -> str:
        """Inserts new_str as whole lines after line insert_line (0 = top of the file)."""
        loaded = self._load(path)
        text = loaded.text
        content = text.content
        lines = split_lines(content)
        if not 0 <= insert_line <= len(lines):
            raise InvalidArgumentError(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                f"of lines of the file: {[0, len(lines)]}"
            )
        new = text.adopt(new_str)
        newline = "\n"
        if text.mixed_newlines:  # the new lines take the ending of the line they follow
            newline = "\r\n" if lines[max(0, insert_line - 1)].endswith("\r") else "\n"
            new = _with_newlines(new, newline)
        if insert_line == len(lines) and content and not content.endswith("\n"):
            new_content = f"{content}{newline}{new}"
        else:
            block = new if new.endswith("\n") else f"{new}{newline}"
            offset = sum(len(line) + 1 for line in lines[:insert_line])
            new_content = content[:offset] + block + content[offset:]
        self._store(path, loaded, text.encode(new_content, path))
        inserted = max(1, len(split_lines(new)))
        shown = snippet(
            new_content,
            insert_line - SNIPPET_LINES,
            insert_line + inserted - 1 + SNIPPET_LINES,
            "a snippet of the edited file",
            self._max_output_chars,
        )
        return f"The file {path} has been edited. {shown}{_INSERTED}"

    def undo_edit(self, path: str) -> str:
        """Restores the file as it was before its latest create/str_replace/insert."""
        real = self._resolve(path)
        if os.path.isdir(real):
            raise disk.is_a_directory(path)
        snapshot = self._history.pop(real)
        if snapshot is None:
            raise NotFoundError(f"No edit history found for {path}.")
        try:
            if snapshot.content is None:
                disk.remove_created(path, real)
            else:
                disk.restore(path, real, snapshot.content)
        except BaseException:
            self._history.push_back(real, snapshot)
            raise
        if snapshot.content is None:
            return (
                f"Last edit to {path} undone successfully. That edit created the file, so it "
                "has been deleted."
            )
        listing = self._whole_file(path, Text.decode(snapshot.content, path))
        return f"Last edit to {path} undone successfully. {listing}"

    # -- paths and I/O -------------------------------------------------------------------------

    def _resolve(self, path: str) -> str:
        if not path:
            raise InvalidArgumentError(
                "The `path` parameter is empty; give an absolute path such as `/testbed/file.py`."
            )
        if not os.path.isabs(path):
            raise InvalidArgumentError(
                f"The path {path} is not an absolute path, it should start with `/`. "
                f"Maybe you meant {self._cwd / path}?"
            )
        return os.path.realpath(path)

    def _load(self, path: str) -> _Loaded:
        """Reads a file for editing: it must exist, be regular, text, and within the limit."""
        real = self._resolve(path)
        info = disk.stat_existing(path, real)
        disk.require_regular_file(path, info)
        if info.st_size > self._max_file_bytes:
            raise FailedPreconditionError(
                f"The file {path} is too large to edit with `str_replace_editor` "
                f"({info.st_size} bytes; the limit is {self._max_file_bytes}). Edit it with "
                "`execute_bash` tools such as `sed -i` instead."
            )
        data = disk.read_bytes(path, real)
        return _Loaded(real, info, data, Text.decode(data, path))

    def _store(self, path: str, loaded: _Loaded, data: bytes) -> None:
        """Replaces an edited file's bytes (mode and owner kept) and records the undo state."""
        self._check_size(path, len(data))
        disk.rewrite(path, loaded.real, loaded.info, data)
        self._history.record(loaded.real, loaded.data)

    def _check_size(self, path: str, size: int) -> None:
        if size > self._max_file_bytes:
            raise FailedPreconditionError(
                f"No change was made: {path} would be {size} bytes, over the editor's limit of "
                f"{self._max_file_bytes}. Write large files with `execute_bash` instead."
            )

    def _whole_file(self, path: str, text: Text) -> str:
        limit, content = self._max_output_chars, text.content
        if len(content) > limit:  # split and number only the part that can be shown
            lines = content[:limit].split("\n")
            listing = cat_n(lines, path, first_line=1, limit=limit, force_clip=True)
        else:
            listing = cat_n(split_lines(content), path, first_line=1, limit=limit)
        return _noted(listing, text, path)

    def _view_directory(self, path: str) -> str:
        entries, truncated = list_tree(
            path, max_depth=2, max_entries=MAX_LISTING_ENTRIES, include_hidden=False
        )
        names = [path, *(f"{e.path}/" if e.is_dir else e.path for e in entries)]
        note = (
            "<response clipped><NOTE>Not every file and directory is listed. View a "
            "subdirectory, or narrow the search with `find` or `ls` in `execute_bash`.</NOTE>"
        )
        body = clip("\n".join(names) + "\n", self._max_output_chars, note, force=truncated)
        return for_model(
            f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden "
            f"items:\n{body}"
        )

    def _view_large_file(self, path: str, real: str, line_range: tuple[int, int]) -> str:
        """view_range over a file too large to load: streams it, keeping only what is shown."""
        start, end = line_range
        budget = 4 * self._max_output_chars  # bytes that can hold the shown characters
        streamed = disk.stream_line_range(path, real, start, end, budget)
        if streamed.line_count is not None:
            _check_view_range(path, line_range, streamed.line_count)
        decoded = encoding.decode_text(streamed.data)
        listing = cat_n(
            split_lines(decoded.content),
            path,
            first_line=start,
            limit=self._max_output_chars,
            force_clip=streamed.clipped,
        )
        note = encoding.note(decoded, path)
        return f"{listing}{note}\n" if note else listing


def _parse_view_range(view_range: Sequence[int]) -> tuple[int, int]:
    values = list(view_range)
    if len(values) != 2 or not all(type(v) is int for v in values):
        raise InvalidArgumentError("Invalid `view_range`. It should be a list of two integers.")
    return values[0], values[1]


def _check_view_range(path: str, line_range: tuple[int, int], line_count: int) -> None:
    start, end = line_range
    shown = list(line_range)
    if line_count == 0:
        raise InvalidArgumentError(
            f"Invalid `view_range`: {shown}. The file {path} is empty, so it has no lines to show."
        )
    if not 1 <= start <= line_count:
        raise InvalidArgumentError(
            f"Invalid `view_range`: {shown}. Its first element `{start}` should be within the "
            f"range of lines of the file: {[1, line_count]}"
        )
    if end > line_count:
        raise InvalidArgumentError(
            f"Invalid `view_range`: {shown}. Its second element `{end}` should be smaller than "
            f"the number of lines in the file: `{line_count}`"
        )
    if end != -1 and end < start:
        raise InvalidArgumentError(
            f"Invalid `view_range`: {shown}. Its second element `{end}` should be larger or "
            f"equal than its first `{start}`"
        )


def _occurrences(content: str, old: str, *, mixed_newlines: bool) -> list[tuple[int, int]]:
    """(start, end) of each occurrence of old in content, up to a reporting cap.

    Occurrences do not overlap (`aa` occurs once in `aaa`), as `str.count` counts them in
    the canonical editors. With mixed line endings, a newline in old matches either one.
    """
    if mixed_newlines and "\n" in old:
        escaped = re.escape(old.replace("\r\n", "\n"))
        pattern = escaped.replace(re.escape("\n"), r"\r?\n")
        matches = itertools.islice(re.finditer(pattern, content), _MAX_REPORTED_OCCURRENCES)
        return [match.span() for match in matches]
    spans: list[tuple[int, int]] = []
    at = content.find(old)
    while at != -1 and len(spans) < _MAX_REPORTED_OCCURRENCES:
        spans.append((at, at + len(old)))
        at = content.find(old, at + len(old))
    return spans


def _ending_near(content: str, start: int, end: int) -> str:
    """The line ending of the replaced text, or else of the line it ends in."""
    replaced = content[start:end]
    if "\n" in replaced:
        return "\r\n" if "\r\n" in replaced else "\n"
    newline = content.find("\n", end)
    return "\r\n" if newline > 0 and content[newline - 1] == "\r" else "\n"


def _with_newlines(text: str, newline: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", newline)


def _noted(listing: str, text: Text, path: str) -> str:
    note = text.note(path)
    return f"{listing}{note}\n" if note else listing


def _encode(file_text: str) -> bytes:
    try:
        return file_text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError("`file_text` is not valid Unicode text.") from None


def _already_exists(path: str) -> AlreadyExistsError:
    return AlreadyExistsError(
        f"File already exists at: {path}. Cannot overwrite files using command `create`. "
        "Change it with `str_replace` or `insert`, or overwrite it with a shell redirect in "
        "`execute_bash`."
    )
