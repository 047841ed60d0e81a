"""FileEditor against real files in tmp_path: every command, every error path, exact texts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandfleet_runtime.editor import MAX_LISTING_ENTRIES, FileEditor
from sandfleet_runtime.editor_text import FILE_CLIPPED_NOTE
from sandfleet_runtime.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)

MiB = 1024 * 1024
EDITED = "Review the changes and make sure they are as expected. Edit the file again if necessary."
INSERTED = (
    "Review the changes and make sure they are as expected (correct indentation, no duplicate "
    "lines, etc). Edit the file again if necessary."
)
LISTING_NOTE = (
    "[Listing truncated. View a subdirectory, or narrow the search with `find` or `ls` in "
    "`execute_bash`.]\n"
)


@pytest.fixture
def editor(tmp_path: Path) -> FileEditor:
    return FileEditor(max_file_bytes=MiB, cwd=tmp_path)


def write(path: Path, data: bytes | str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


def numbered(first: int, *lines: str) -> str:
    return "".join(f"{n:6}\t{line}\n" for n, line in enumerate(lines, start=first))


def twelve_lines(tmp_path: Path) -> str:
    return write(tmp_path / "twelve.txt", "".join(f"l{n}\n" for n in range(1, 13)))


# -- paths ----------------------------------------------------------------------------------


def test_a_relative_path_is_refused_with_the_absolute_path_suggested(
    editor: FileEditor, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        editor.view("src/app.py")
    assert str(raised.value) == (
        "The path src/app.py is not an absolute path, it should start with `/`. "
        f"Maybe you meant {tmp_path}/src/app.py?"
    )


@pytest.mark.parametrize("command", ["view", "str_replace", "insert", "create", "undo_edit"])
def test_every_command_refuses_a_relative_path(editor: FileEditor, command: str) -> None:
    calls = {
        "view": lambda: editor.view("a.txt"),
        "create": lambda: editor.create("a.txt", "x"),
        "str_replace": lambda: editor.str_replace("a.txt", "x", "y"),
        "insert": lambda: editor.insert("a.txt", 0, "x"),
        "undo_edit": lambda: editor.undo_edit("a.txt"),
    }
    with pytest.raises(InvalidArgumentError, match="is not an absolute path"):
        calls[command]()


def test_an_empty_path_is_refused(editor: FileEditor) -> None:
    with pytest.raises(InvalidArgumentError, match="`path` parameter is empty"):
        editor.view("")


@pytest.mark.parametrize("command", ["view", "str_replace", "insert"])
def test_a_missing_path_is_reported_as_not_found(
    editor: FileEditor, tmp_path: Path, command: str
) -> None:
    missing = str(tmp_path / "nope.txt")
    calls = {
        "view": lambda: editor.view(missing),
        "str_replace": lambda: editor.str_replace(missing, "x", "y"),
        "insert": lambda: editor.insert(missing, 0, "x"),
    }
    with pytest.raises(NotFoundError) as raised:
        calls[command]()
    assert str(raised.value) == f"The path {missing} does not exist. Please provide a valid path."


@pytest.mark.parametrize("command", ["create", "str_replace", "insert", "undo_edit"])
def test_editing_commands_refuse_a_directory(
    editor: FileEditor, tmp_path: Path, command: str
) -> None:
    calls = {
        "create": lambda: editor.create(str(tmp_path), "x"),
        "str_replace": lambda: editor.str_replace(str(tmp_path), "x", "y"),
        "insert": lambda: editor.insert(str(tmp_path), 0, "x"),
        "undo_edit": lambda: editor.undo_edit(str(tmp_path)),
    }
    with pytest.raises(FailedPreconditionError) as raised:
        calls[command]()
    assert str(raised.value) == (
        f"The path {tmp_path} is a directory and only the `view` command can be used on directories"
    )


def test_a_fifo_is_refused_instead_of_blocking(editor: FileEditor, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FailedPreconditionError, match="not a regular file"):
        editor.view(str(fifo))


# -- view: files ----------------------------------------------------------------------------


def test_view_numbers_lines_like_cat_n_without_a_phantom_last_line(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.py", "import os\n\nprint(os.getcwd())\n")
    assert editor.view(path) == (
        f"Here's the result of running `cat -n` on {path}:\n"
        + numbered(1, "import os", "", "print(os.getcwd())")
    )


def test_view_shows_the_last_line_of_a_file_without_a_final_newline(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.txt", "one\ntwo")
    assert editor.view(path).endswith(numbered(1, "one", "two"))


@pytest.mark.parametrize("name", ["notes.txt", "README.md", "table.csv", "data.json", "Makefile"])
def test_view_shows_any_text_file_type(editor: FileEditor, tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, 'a,b\n{"k": 1}\n')
    assert editor.view(path).endswith(numbered(1, "a,b", '{"k": 1}'))


def test_view_shows_tabs_as_tabs(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "Makefile", "all:\n\techo hi\n")
    assert editor.view(path).endswith(numbered(1, "all:", "\techo hi"))


def test_view_shows_unicode_text(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "u.txt", "héllo wörld ✓\n日本語\n")
    assert editor.view(path).endswith(numbered(1, "héllo wörld ✓", "日本語"))


def test_view_replaces_invalid_utf8_in_a_mostly_text_file(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "latin1.txt", "caf\xe9 ok\n".encode("latin-1"))
    assert editor.view(path).endswith(numbered(1, "caf\ufffd ok"))


def test_view_refuses_a_binary_file_and_suggests_shell_tools(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "blob.bin", b"\x7fELF\x00\x01\x02")
    with pytest.raises(FailedPreconditionError) as raised:
        editor.view(path)
    assert "binary file" in str(raised.value)
    assert f"xxd {path}" in str(raised.value)
    assert f"file {path}" in str(raised.value)


def test_view_refuses_undecodable_bytes_without_nul_as_binary(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "noise.bin", bytes(range(0x80, 0x100)) * 4)
    with pytest.raises(FailedPreconditionError, match="binary file"):
        editor.view(path)


def test_view_clips_long_output_with_the_grep_note(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, max_output_chars=200)
    path = write(tmp_path / "long.txt", "".join(f"line {n}\n" for n in range(1, 1000)))
    output = editor.view(path)
    assert output.endswith(f"{FILE_CLIPPED_NOTE}\n")
    body = output.split("\n", 1)[1].removesuffix(f"{FILE_CLIPPED_NOTE}\n")
    assert len(body) <= 200
    assert body.startswith(numbered(1, "line 1", "line 2"))
    assert body.endswith("\n")  # cut at a line boundary


def test_view_clips_a_single_huge_line(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, max_output_chars=100)
    path = write(tmp_path / "min.js", "x" * 10_000)
    output = editor.view(path)
    assert output.endswith(f"\n{FILE_CLIPPED_NOTE}\n")
    body = output.split("\n", 1)[1]
    assert body == f"     1\t{'x' * 93}\n{FILE_CLIPPED_NOTE}\n"


def test_view_range_shows_inclusive_lines_and_minus_one_means_to_the_end(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = twelve_lines(tmp_path)
    header = f"Here's the result of running `cat -n` on {path}:\n"
    assert editor.view(path, [3, 5]) == header + numbered(3, "l3", "l4", "l5")
    assert editor.view(path, [11, -1]) == header + numbered(11, "l11", "l12")
    assert editor.view(path, [12, 12]) == header + numbered(12, "l12")


def test_an_empty_view_range_means_the_whole_file(editor: FileEditor, tmp_path: Path) -> None:
    path = twelve_lines(tmp_path)
    assert editor.view(path, []) == editor.view(path)


@pytest.mark.parametrize(
    ("view_range", "message"),
    [
        (
            [0, 3],
            "Invalid `view_range`: [0, 3]. Its first element `0` should be within the range of "
            "lines of the file: [1, 12]",
        ),
        (
            [13, -1],
            "Invalid `view_range`: [13, -1]. Its first element `13` should be within the range "
            "of lines of the file: [1, 12]",
        ),
        (
            [2, 13],
            "Invalid `view_range`: [2, 13]. Its second element `13` should be smaller than the "
            "number of lines in the file: `12`",
        ),
        (
            [5, 4],
            "Invalid `view_range`: [5, 4]. Its second element `4` should be larger or equal "
            "than its first `5`",
        ),
        (
            [5, -2],
            "Invalid `view_range`: [5, -2]. Its second element `-2` should be larger or equal "
            "than its first `5`",
        ),
        ([1], "Invalid `view_range`. It should be a list of two integers."),
        ([1, 2, 3], "Invalid `view_range`. It should be a list of two integers."),
    ],
)
def test_an_invalid_view_range_is_explained(
    editor: FileEditor, tmp_path: Path, view_range: list[int], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        editor.view(twelve_lines(tmp_path), view_range)
    assert str(raised.value) == message


def test_a_view_range_on_an_empty_file_says_it_is_empty(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "empty.txt", "")
    assert editor.view(path) == f"Here's the result of running `cat -n` on {path}:\n"
    with pytest.raises(InvalidArgumentError, match="is empty, so it has no lines to show"):
        editor.view(path, [1, 1])


def test_view_refuses_a_file_over_the_size_limit_and_suggests_view_range(
    tmp_path: Path,
) -> None:
    editor = FileEditor(max_file_bytes=1000)
    path = write(tmp_path / "big.log", "".join(f"entry {n}\n" for n in range(1, 501)))
    with pytest.raises(FailedPreconditionError) as raised:
        editor.view(path)
    assert "too large to show at once" in str(raised.value)
    assert "`view_range`" in str(raised.value)
    assert "`grep -n`" in str(raised.value)


def test_view_range_streams_a_file_over_the_size_limit(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=1000)
    path = write(tmp_path / "big.log", "".join(f"entry {n}\r\n" for n in range(1, 501)))
    header = f"Here's the result of running `cat -n` on {path}:\n"
    assert editor.view(path, [250, 252]) == header + numbered(
        250, "entry 250", "entry 251", "entry 252"
    )
    assert editor.view(path, [499, -1]) == header + numbered(499, "entry 499", "entry 500")
    with pytest.raises(InvalidArgumentError, match=r"number of lines in the file: `500`"):
        editor.view(path, [1, 501])
    with pytest.raises(InvalidArgumentError, match=r"range of lines of the file: \[1, 500\]"):
        editor.view(path, [600, -1])


def test_view_range_on_a_huge_file_clips_what_it_shows(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=1000, max_output_chars=300)
    path = write(tmp_path / "big.log", "".join(f"entry {n}\n" for n in range(1, 5001)))
    output = editor.view(path, [10, -1])
    assert output.endswith(f"{FILE_CLIPPED_NOTE}\n")
    body = output.split("\n", 1)[1].removesuffix(f"{FILE_CLIPPED_NOTE}\n")
    assert body.startswith(numbered(10, "entry 10", "entry 11"))
    assert 250 < len(body) <= 300


def test_view_range_on_a_huge_binary_file_is_refused(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=10)
    path = write(tmp_path / "big.bin", b"\0" * 100)
    with pytest.raises(FailedPreconditionError, match="binary file"):
        editor.view(path, [1, 2])


# -- view: directories ----------------------------------------------------------------------


def test_view_lists_a_directory_two_levels_deep_without_hidden_items(
    editor: FileEditor, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    for name in ["b.py", "a/x.txt", "a/deep/too_deep.txt", ".git/config", "a/.env", "c/.hid/y"]:
        write(root / name, "")
    assert editor.view(str(root)) == (
        f"Here's the files and directories up to 2 levels deep in {root}, excluding hidden "
        "items:\n"
        f"{root}\n"
        f"{root}/a/\n"
        f"{root}/a/deep/\n"
        f"{root}/a/x.txt\n"
        f"{root}/b.py\n"
        f"{root}/c/\n"
    )


def test_view_range_on_a_directory_is_refused(editor: FileEditor, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        editor.view(str(tmp_path), [1, 2])
    assert str(raised.value) == (
        "The `view_range` parameter is not allowed when `path` points to a directory."
    )


def test_a_directory_listing_stops_at_the_entry_cap_with_a_note(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, max_output_chars=1_000_000)
    for n in range(MAX_LISTING_ENTRIES + 5):
        (tmp_path / f"f{n:05}").touch()
    output = editor.view(str(tmp_path))
    assert f"{tmp_path}/f{MAX_LISTING_ENTRIES - 1:05}\n" in output
    assert f"f{MAX_LISTING_ENTRIES:05}" not in output
    assert output.endswith(LISTING_NOTE)


def test_a_long_directory_listing_is_clipped_to_the_output_limit(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, max_output_chars=300)
    for n in range(100):
        (tmp_path / f"file_{n:03}.txt").touch()
    output = editor.view(str(tmp_path))
    assert output.endswith(LISTING_NOTE)
    body = output.split("\n", 1)[1].removesuffix(LISTING_NOTE)
    assert body.startswith(f"{tmp_path}\n{tmp_path}/file_000.txt\n")
    assert len(body) <= 300


# -- create ---------------------------------------------------------------------------------


def test_create_writes_exactly_the_given_text_with_mode_644(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = str(tmp_path / "new" / "deeper" / "hello.py")
    assert editor.create(path, "print('hi')") == f"File created successfully at: {path}"
    assert Path(path).read_bytes() == b"print('hi')"  # no newline added
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(tmp_path / "new" / "deeper") == ["hello.py"]  # no temp file left


def test_create_keeps_tabs_crlf_and_unicode_byte_exact(editor: FileEditor, tmp_path: Path) -> None:
    text = "all:\r\n\techo 'héllo ✓'\r\n\r\n"
    path = str(tmp_path / "Makefile")
    editor.create(path, text)
    assert Path(path).read_bytes() == text.encode()


def test_create_writes_files_larger_than_128_kib(editor: FileEditor, tmp_path: Path) -> None:
    text = "".join(f"row {n}: {'x' * 60}\n" for n in range(5000))
    assert len(text) > 300 * 1024
    path = str(tmp_path / "big.txt")
    editor.create(path, text)
    assert Path(path).read_text() == text


def test_create_refuses_an_existing_file_and_suggests_alternatives(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.txt", "keep me")
    with pytest.raises(AlreadyExistsError) as raised:
        editor.create(path, "new")
    message = str(raised.value)
    assert message.startswith(
        f"File already exists at: {path}. Cannot overwrite files using command `create`."
    )
    assert "`str_replace`" in message
    assert "shell redirect" in message
    assert Path(path).read_text() == "keep me"


def test_create_refuses_a_path_ending_in_a_slash(editor: FileEditor, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="ends with `/`"):
        editor.create(f"{tmp_path}/sub/", "x")


def test_create_refuses_text_over_the_size_limit(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=10)
    path = str(tmp_path / "a.txt")
    with pytest.raises(FailedPreconditionError, match="over the editor's limit of 10"):
        editor.create(path, "x" * 11)
    assert not os.path.exists(path)


def test_create_below_a_file_reports_the_blocking_file(editor: FileEditor, tmp_path: Path) -> None:
    write(tmp_path / "plain", "")
    with pytest.raises(FailedPreconditionError, match="part of that path is a file"):
        editor.create(str(tmp_path / "plain" / "child.txt"), "x")


# -- str_replace ----------------------------------------------------------------------------


def test_str_replace_edits_and_shows_a_snippet_of_four_lines_around_the_edit(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = twelve_lines(tmp_path)
    output = editor.str_replace(path, "l6\n", "L6a\nL6b\n")
    assert output == (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet "
        f"of {path}:\n"
        + numbered(2, "l2", "l3", "l4", "l5", "L6a", "L6b", "l7", "l8", "l9", "l10")
        + EDITED
    )
    assert Path(path).read_text() == "".join(
        f"l{n}\n" if n != 6 else "L6a\nL6b\n" for n in range(1, 13)
    )


def test_str_replace_snippet_is_clamped_at_the_top_of_the_file(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = twelve_lines(tmp_path)
    output = editor.str_replace(path, "l2\n", "two\n")
    assert f"{path}:\n" + numbered(1, "l1", "two", "l3", "l4", "l5", "l6") + EDITED in output


def test_str_replace_without_new_str_deletes_the_text(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "keep\ndrop me\nkeep too\n")
    editor.str_replace(path, "drop me\n", None)
    assert Path(path).read_text() == "keep\nkeep too\n"


def test_str_replace_reports_old_str_that_is_not_in_the_file(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.py", "x = 1\n")
    with pytest.raises(FailedPreconditionError) as raised:
        editor.str_replace(path, "y = 2", "y = 3")
    assert str(raised.value) == (
        f"No replacement was performed, old_str `y = 2` did not appear verbatim in {path}."
    )


def test_str_replace_hints_at_tabs_when_spaces_do_not_match(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "Makefile", "all:\n\techo hi\n")
    with pytest.raises(FailedPreconditionError, match="contains tab characters"):
        editor.str_replace(path, "        echo hi", "        echo bye")


def test_str_replace_reports_every_line_of_a_non_unique_old_str(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.py", "x = 1\ny = 2\nx = 1\n\nx = 1\n")
    with pytest.raises(FailedPreconditionError) as raised:
        editor.str_replace(path, "x = 1", "x = 3")
    assert str(raised.value) == (
        "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines "
        "[1, 3, 5]. Please ensure it is unique"
    )
    assert Path(path).read_text() == "x = 1\ny = 2\nx = 1\n\nx = 1\n"


def test_str_replace_counts_overlapping_occurrences_as_ambiguous(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.txt", "aaa\n")
    with pytest.raises(FailedPreconditionError, match="Multiple occurrences"):
        editor.str_replace(path, "aa", "b")


def test_str_replace_refuses_an_empty_old_str(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "x\n")
    with pytest.raises(InvalidArgumentError, match="`old_str` must not be empty"):
        editor.str_replace(path, "", "y")


def test_str_replace_refuses_a_new_str_equal_to_old_str(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "x\n")
    with pytest.raises(InvalidArgumentError, match="`new_str` is identical to `old_str`"):
        editor.str_replace(path, "x", "x")


def test_str_replace_keeps_tabs_and_other_bytes_exactly(editor: FileEditor, tmp_path: Path) -> None:
    before = b"all:\n\techo a\n\t\techo b  \nbad byte \xff here\n"
    path = write(tmp_path / "Makefile", before)
    output = editor.str_replace(path, "\techo a", "\techo A")
    assert Path(path).read_bytes() == before.replace(b"\techo a", b"\techo A")
    assert "bad byte \ufffd here" in output  # shown replaced, valid UTF-8 for the wire
    output.encode("utf-8")


def test_str_replace_keeps_crlf_line_endings(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "win.txt", b"one\r\ntwo\r\nthree\r\n")
    output = editor.str_replace(path, "one\ntwo\n", "1\n2\n")  # model writes plain \n
    assert Path(path).read_bytes() == b"1\r\n2\r\nthree\r\n"
    assert "\r" not in output


def test_str_replace_keeps_the_file_mode(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "run.sh", "#!/bin/sh\necho a\n")
    os.chmod(path, 0o755)
    editor.str_replace(path, "echo a", "echo b")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755


def test_str_replace_through_a_symlink_edits_the_target_and_keeps_the_link(
    editor: FileEditor, tmp_path: Path
) -> None:
    target = write(tmp_path / "real.txt", "old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    editor.str_replace(str(link), "old", "new")
    assert link.is_symlink()
    assert Path(target).read_text() == "new\n"


def test_str_replace_works_on_unicode_text(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "u.txt", "名前 = 'ä'\n")
    editor.str_replace(path, "'ä'", "'ö ✓'")
    assert Path(path).read_text(encoding="utf-8") == "名前 = 'ö ✓'\n"


def test_str_replace_works_on_files_larger_than_128_kib(editor: FileEditor, tmp_path: Path) -> None:
    lines = [f"row {n}: {'x' * 60}\n" for n in range(5000)]
    path = write(tmp_path / "big.txt", "".join(lines))
    editor.str_replace(path, "row 4321:", "ROW 4321:")
    lines[4321] = lines[4321].replace("row", "ROW")
    assert Path(path).read_text() == "".join(lines)


def test_str_replace_refuses_a_binary_file(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.bin", b"ab\0cd")
    with pytest.raises(FailedPreconditionError, match="binary file"):
        editor.str_replace(path, "ab", "xy")


def test_editing_refuses_a_file_over_the_size_limit(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=10)
    path = write(tmp_path / "a.txt", "x" * 11)
    with pytest.raises(FailedPreconditionError, match="too large to edit"):
        editor.str_replace(path, "x", "y")
    with pytest.raises(FailedPreconditionError, match="too large to edit"):
        editor.insert(path, 0, "y")


def test_an_edit_that_would_exceed_the_size_limit_is_refused(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=10)
    path = write(tmp_path / "a.txt", "x\n")
    with pytest.raises(FailedPreconditionError, match="would be 12 bytes"):
        editor.str_replace(path, "x", "y" * 11)
    assert Path(path).read_text() == "x\n"


# -- insert ---------------------------------------------------------------------------------


def test_insert_puts_lines_after_the_given_line_and_shows_a_snippet(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = twelve_lines(tmp_path)
    output = editor.insert(path, 6, "new")
    assert output == (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet "
        "of the edited file:\n"
        + numbered(3, "l3", "l4", "l5", "l6", "new", "l7", "l8", "l9", "l10")
        + INSERTED
    )
    assert Path(path).read_text().splitlines()[5:8] == ["l6", "new", "l7"]


def test_insert_at_zero_puts_text_at_the_top(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "b\nc\n")
    output = editor.insert(path, 0, "#!/usr/bin/env python\nimport os")
    assert Path(path).read_text() == "#!/usr/bin/env python\nimport os\nb\nc\n"
    assert numbered(1, "#!/usr/bin/env python", "import os", "b", "c") + INSERTED in output


def test_insert_after_the_last_line(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "a\nb\n")
    editor.insert(path, 2, "c")
    assert Path(path).read_text() == "a\nb\nc\n"


def test_insert_does_not_double_a_trailing_newline_of_new_str(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.py", "a\nb\n")
    editor.insert(path, 1, "x\n")
    assert Path(path).read_text() == "a\nx\nb\n"


def test_insert_of_an_empty_string_adds_an_empty_line(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "a\nb\n")
    editor.insert(path, 1, "")
    assert Path(path).read_text() == "a\n\nb\n"


def test_insert_at_the_end_of_a_file_without_a_final_newline_keeps_that_style(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.txt", "a\nb")
    editor.insert(path, 2, "c")
    assert Path(path).read_text() == "a\nb\nc"
    editor.insert(path, 1, "mid")
    assert Path(path).read_text() == "a\nmid\nb\nc"


def test_insert_into_an_empty_file(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "")
    editor.insert(path, 0, "first")
    assert Path(path).read_text() == "first\n"


def test_insert_keeps_crlf_line_endings(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "win.txt", b"one\r\ntwo\r\n")
    editor.insert(path, 1, "a\nb")
    assert Path(path).read_bytes() == b"one\r\na\r\nb\r\ntwo\r\n"


def test_insert_keeps_tabs_byte_exact(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "Makefile", "all:\n\techo a\n")
    editor.insert(path, 2, "\techo b")
    assert Path(path).read_bytes() == b"all:\n\techo a\n\techo b\n"


@pytest.mark.parametrize("line", [-1, 3])
def test_insert_refuses_a_line_outside_the_file(
    editor: FileEditor, tmp_path: Path, line: int
) -> None:
    path = write(tmp_path / "a.py", "a\nb\n")
    with pytest.raises(InvalidArgumentError) as raised:
        editor.insert(path, line, "x")
    assert str(raised.value) == (
        f"Invalid `insert_line` parameter: {line}. It should be within the range of lines of "
        "the file: [0, 2]"
    )


# -- undo_edit ------------------------------------------------------------------------------


def test_undo_edit_steps_back_through_every_edit(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "v1\n")
    editor.str_replace(path, "v1", "v2")
    editor.insert(path, 1, "v3")
    editor.str_replace(path, "v2", "v2b")
    assert editor.undo_edit(path) == (
        f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on "
        f"{path}:\n" + numbered(1, "v2", "v3")
    )
    editor.undo_edit(path)
    assert Path(path).read_text() == "v2\n"
    editor.undo_edit(path)
    assert Path(path).read_text() == "v1\n"
    with pytest.raises(NotFoundError) as raised:
        editor.undo_edit(path)
    assert str(raised.value) == f"No edit history found for {path}."


def test_undo_edit_without_history_is_not_found(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "a.py", "v1\n")
    with pytest.raises(NotFoundError, match="No edit history found"):
        editor.undo_edit(path)
    with pytest.raises(NotFoundError, match="No edit history found"):
        editor.undo_edit(str(tmp_path / "never.py"))


def test_undo_edit_after_create_deletes_the_file(editor: FileEditor, tmp_path: Path) -> None:
    path = str(tmp_path / "new.py")
    editor.create(path, "x = 1\n")
    editor.str_replace(path, "1", "2")
    editor.undo_edit(path)
    assert Path(path).read_text() == "x = 1\n"
    assert editor.undo_edit(path) == (
        f"Last edit to {path} undone successfully. That edit created the file, so it has been "
        "deleted."
    )
    assert not os.path.exists(path)


def test_undo_edit_keeps_the_file_mode_and_crlf(editor: FileEditor, tmp_path: Path) -> None:
    path = write(tmp_path / "run.cmd", b"echo a\r\necho b\r\n")
    os.chmod(path, 0o750)
    editor.str_replace(path, "echo a", "echo A")
    editor.undo_edit(path)
    assert Path(path).read_bytes() == b"echo a\r\necho b\r\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o750


def test_undo_edit_brings_back_a_file_deleted_since_the_edit(
    editor: FileEditor, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.py", "v1\n")
    editor.str_replace(path, "v1", "v2")
    os.remove(path)
    editor.undo_edit(path)
    assert Path(path).read_text() == "v1\n"


def test_undo_history_is_bounded_per_file(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, history_depth=2)
    path = write(tmp_path / "a.py", "v0\n")
    for n in range(1, 5):
        editor.str_replace(path, f"v{n - 1}", f"v{n}")
    editor.undo_edit(path)
    editor.undo_edit(path)
    assert Path(path).read_text() == "v2\n"
    with pytest.raises(NotFoundError):
        editor.undo_edit(path)


def test_undo_history_drops_the_oldest_snapshots_over_the_byte_budget(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, history_max_bytes=250)
    first = write(tmp_path / "first.txt", "a" * 100)
    second = write(tmp_path / "second.txt", "b" * 100)
    editor.str_replace(first, "a" * 100, "A" * 100)  # snapshot 100 bytes
    editor.str_replace(second, "b" * 100, "B" * 100)  # 200 bytes in total
    editor.str_replace(second, "B" * 100, "C" * 100)  # 300 > 250: first's snapshot goes
    with pytest.raises(NotFoundError):
        editor.undo_edit(first)
    editor.undo_edit(second)
    editor.undo_edit(second)
    assert Path(second).read_text() == "b" * 100


def test_a_snapshot_larger_than_the_budget_clears_that_files_history(tmp_path: Path) -> None:
    editor = FileEditor(max_file_bytes=MiB, history_max_bytes=50)
    path = write(tmp_path / "a.txt", "small\n")
    editor.str_replace(path, "small", "x" * 100)
    editor.str_replace(path, "x" * 100, "y")  # its snapshot (101 bytes) cannot be kept
    with pytest.raises(NotFoundError):
        editor.undo_edit(path)  # never skips back past the unrecorded edit
    assert Path(path).read_text() == "y\n"
