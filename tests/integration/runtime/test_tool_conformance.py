"""Conformance of the model's tools with the canonical ones (issue 13, "tool fidelity").

Each test pins one behaviour of Anthropic's reference editor and bash tool, SWE-agent,
OpenHands or the seed project (llm-in-sandbox), as its docstring says, through
`Sandbox.call_tool` on a real runtime on 127.0.0.1 with real bash: the text asserted is the
observation the model reads.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.sandbox.facade import Sandbox
from sandfleet_runtime.editor.file_editor import MAX_LISTING_ENTRIES
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

BASH = "execute_bash"
EDITOR = "str_replace_editor"
BASH_OK = "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n"
EDITOR_HEADER = "Execution output of \\[str_replace_editor]:\n"


@pytest.fixture
async def address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, str]]:
    """A runtime whose shells do not inherit this process's PYTHONUNBUFFERED, so the
    runtime's own default is what is tested."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with running_runtime(workdir) as (server, token):
        yield f"127.0.0.1:{server.port}", token


@pytest.fixture
async def sandbox(address: tuple[str, str]) -> AsyncIterator[Sandbox]:
    sandbox = await Sandbox.connect(*address)
    yield sandbox
    await sandbox.close()


async def bash(sandbox: Sandbox, command: str) -> str:
    return await sandbox.call_tool(BASH, {"command": command})


async def test_strict_mode_lasts_one_call_and_the_session_keeps_its_state(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Anthropic's bash tool and OpenHands keep one shell whose cwd and exports persist; a
    `set -euo pipefail` one call made must not end that shell at a later call's unset
    variable, nor change what its pipelines report."""
    assert await bash(sandbox, f"cd {tmp_path}; export KEEP=1; set -euo pipefail; echo on") == (
        f"{BASH_OK}on\n"
    )
    later = await bash(sandbox, 'echo "[$UNSET_VARIABLE]" "$KEEP"; pwd; false | true; echo $?')
    assert later == f"{BASH_OK}[] 1\n{tmp_path}\n0\n"


async def test_what_python_printed_before_a_timeout_is_kept(address: tuple[str, str]) -> None:
    """OpenHands and the seed show the output a command produced before its timeout. A
    Python program's stdout is a pipe here, block-buffered, and the kill would drop the
    buffer; the sandbox's shells run Python unbuffered (PYTHONUNBUFFERED=1)."""
    sandbox = await Sandbox.connect(*address, tool_timeout_s=1)
    try:
        observed = await bash(
            sandbox, "python3 -c 'print(\"before\"); import time; time.sleep(60)'"
        )
    finally:
        await sandbox.close()
    assert observed.startswith("Exit code: -1\nExecution output of \\[execute_bash]:\n")
    assert "\\[STDOUT]\nbefore\n" in observed
    assert "The command timed out after 1 seconds" in observed


async def test_a_latin1_file_is_shown_and_edited_in_its_own_encoding(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """OpenHands' editor detects a file's encoding and writes it back in it; Anthropic's
    reads UTF-8 only, where `caf\\xe9` shows as U+FFFD and no old_str can match it."""
    path = tmp_path / "menu.txt"
    path.write_bytes("café crème\nthé\n".encode("latin-1"))
    viewed = await sandbox.call_tool(EDITOR, {"command": "view", "path": str(path)})
    assert viewed == (
        f"{EDITOR_HEADER}Here's the result of running `cat -n` on {path}:\n"
        "     1\tcafé crème\n     2\tthé\n"
        f"[Note: {path} is not UTF-8 (the first non-UTF-8 byte is 0xe9, at offset 3); it is "
        "shown decoded as Windows-1252, and edits are written back in Windows-1252.]\n"
    )
    edited = await sandbox.call_tool(
        EDITOR, {"command": "str_replace", "path": str(path), "old_str": "café", "new_str": "thé"}
    )
    assert "     1\tthé crème\n" in edited
    assert path.read_bytes() == "thé crème\nthé\n".encode("latin-1")
    refused = await sandbox.call_tool(
        EDITOR, {"command": "str_replace", "path": str(path), "old_str": "crème", "new_str": "→"}
    )
    assert "cannot hold '→' (U+2192)" in refused
    assert path.read_bytes() == "thé crème\nthé\n".encode("latin-1")


async def test_line_endings_are_hidden_in_view_and_kept_on_write(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Anthropic's and SWE-agent's editors read with universal newlines, so `view` never
    shows a `\\r` and an old_str written with `\\n` matches CRLF lines; unlike them, the
    bytes are kept: CRLF lines stay CRLF and a CRLF file stays CRLF."""
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"one\r\ntwo\nthree\r\n")
    viewed = await sandbox.call_tool(EDITOR, {"command": "view", "path": str(mixed)})
    assert viewed.endswith("     1\tone\n     2\ttwo\n     3\tthree\n")
    assert "\r" not in viewed
    await sandbox.call_tool(
        EDITOR,
        {"command": "str_replace", "path": str(mixed), "old_str": "one\ntwo", "new_str": "1\n2"},
    )
    assert mixed.read_bytes() == b"1\r\n2\nthree\r\n"
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"a\r\nb\r\n")
    await sandbox.call_tool(
        EDITOR, {"command": "insert", "path": str(crlf), "insert_line": 1, "new_str": "x\ny"}
    )
    assert crlf.read_bytes() == b"a\r\nx\r\ny\r\nb\r\n"


async def test_occurrences_of_old_str_are_counted_without_overlap(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Anthropic's reference editor (and SWE-agent's, OpenHands') counts with `str.count`:
    `aa` occurs once in `aaa`, so the replacement happens; twice in `aaaa`, so it does not."""
    once = tmp_path / "once.txt"
    once.write_text("aaa\n")
    replaced = await sandbox.call_tool(
        EDITOR, {"command": "str_replace", "path": str(once), "old_str": "aa", "new_str": "b"}
    )
    assert replaced.startswith(f"{EDITOR_HEADER}The file {once} has been edited.")
    assert once.read_text() == "ba\n"
    twice = tmp_path / "twice.txt"
    twice.write_text("aaaa\n")
    refused = await sandbox.call_tool(
        EDITOR, {"command": "str_replace", "path": str(twice), "old_str": "aa", "new_str": "b"}
    )
    assert "Multiple occurrences of old_str `aa` in lines [1]" in refused
    assert twice.read_text() == "aaaa\n"


async def test_ulimit_persists_like_a_terminal_and_never_breaks_the_shell_silently(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """In Anthropic's and OpenHands' persistent shells `ulimit -n 100` lowers the limit for
    later commands, as in a terminal, and the session goes on. A limit so low that the
    shell's own connection breaks must be reported as an error, never as `Exit code: 0`."""
    assert await bash(sandbox, f"cd {tmp_path}; export KEEP=2; ulimit -n 100; echo set") == (
        f"{BASH_OK}set\n"
    )
    assert await bash(sandbox, "echo $KEEP; pwd; ulimit -n") == f"{BASH_OK}2\n{tmp_path}\n100\n"
    broken = await bash(sandbox, "ulimit -n 20; echo lowered")
    assert broken.startswith("Exit code: Error: Exit code 252\n")
    assert "broke the shell's connection to the sandbox" in broken
    assert "a fresh shell was started" in broken
    assert await bash(sandbox, "echo alive") == f"{BASH_OK}alive\n"


async def test_colour_codes_and_progress_redraws_are_stripped_from_observations(
    sandbox: Sandbox,
) -> None:
    """The seed strips ANSI escape sequences and keeps the last state of a line redrawn
    with carriage returns; `Sandbox.bash()` still returns the raw output."""
    command = r"printf '\033[1;31mred\033[0m \033]0;title\007ok\n10%%\r50%%\r100%%\n'"
    assert await bash(sandbox, command) == f"{BASH_OK}red ok\n100%\n"
    raw = await sandbox.bash(command)
    assert raw.stdout == "\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok\n10%\r50%\r100%\n"


async def test_a_clipped_directory_listing_carries_the_promised_marker(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The seed's (and Anthropic's) tool description promises that long output is
    "truncated and marked with `<response clipped>`"; a cut listing says so that way."""
    big = tmp_path / "big"
    big.mkdir()
    for n in range(MAX_LISTING_ENTRIES + 1):
        (big / f"f{n:05d}.txt").touch()
    viewed = await sandbox.call_tool(EDITOR, {"command": "view", "path": str(big)})
    assert viewed.startswith(f"{EDITOR_HEADER}Here's the files and directories up to 2 levels")
    assert viewed.endswith(
        "<response clipped><NOTE>Not every file and directory is listed. View a subdirectory, "
        "or narrow the search with `find` or `ls` in `execute_bash`.</NOTE>\n"
    )


async def test_call_tool_answers_json_text_and_submit_without_raising(sandbox: Sandbox) -> None:
    """The seed answers every call with an observation (`Unknown action: ...`, `Error: ...`)
    and lists `submit` among its tools; `call_tool` takes the model's JSON text too, and
    raises nothing but SandboxLostError."""
    assert await sandbox.call_tool(BASH, '{"command": "echo text"}') == f"{BASH_OK}text\n"
    assert await sandbox.call_tool(BASH, "echo text") == (
        "Error: the arguments for execute_bash are not valid JSON (Expecting value at "
        "character 0). Send the arguments as one JSON object."
    )
    assert await sandbox.call_tool(EDITOR, '["view"]') == (
        "Error: the arguments for str_replace_editor must be a JSON object, got a list."
    )
    assert await sandbox.call_tool("submit", {}) == "Submitted."
    assert await sandbox.call_tool("submit", "") == "Submitted."
    unknown = await sandbox.call_tool("finish", {})
    assert unknown == "Unknown action: finish"  # the seed's text


def _wheel(name: str) -> bytes:
    """A minimal pure-Python wheel holding one module, built in memory (no index needed)."""
    dist = f"{name}-0.1.dist-info"
    files = {
        f"{name}.py": b"ANSWER = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return buffer.getvalue()


@pytest.mark.parametrize("isolation", ["auto", "none"])
async def test_local_sandboxes_offer_python_and_pip_as_the_image_does(
    tmp_path: Path, isolation: str
) -> None:
    """The seed's image (and ours) has `python`; models start with `python -c ...`. `pip`
    is the sandbox's Python's pip, installing into the sandbox's own HOME."""
    config = LocalSandboxConfig(isolation=isolation, state_dir=tmp_path / "state")  # type: ignore[arg-type]
    async with Sandbox.local(config) as sandbox:
        assert await bash(sandbox, "python -c 'print(6 * 7)'") == f"{BASH_OK}42\n"
        which = "import sys; print(sys.prefix, sys.version_info[:3])"
        same = await bash(sandbox, f"python -c '{which}'; python3 -c '{which}'")
        first, second = same.removeprefix(BASH_OK).splitlines()
        assert first == second
        wheel = f"{sandbox.paths.working_dir}/tinyanswer-0.1-py3-none-any.whl"
        await sandbox.upload(_wheel("tinyanswer"), wheel)
        installed = await bash(sandbox, f"pip install --no-index --no-deps -q {wheel}")
        assert installed.startswith(BASH_OK), installed
        found = await bash(
            sandbox,
            "python -c 'import os, tinyanswer; "
            'print(tinyanswer.ANSWER, tinyanswer.__file__.startswith(os.environ["HOME"]))\'',
        )
        assert found == f"{BASH_OK}42 True\n"
