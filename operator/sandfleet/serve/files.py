"""Files in and out: base64 file parts decoded for the input folder, output files served.

A file part's name becomes a plain file name in the sandbox's input folder (no folders, no
`..`); its data is base64, bare or as a data URL. Output files are copied out of the
sandbox when a request ends, below one folder per response, and served from there.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import posixpath
import re
from pathlib import Path

from sandfleet.serve.errors import bad_request

MAX_NAME = 255
_DATA_URL = re.compile(r"^data:[^,;]*(;[^,;]*)*;base64,", re.IGNORECASE)


@dataclasses.dataclass(frozen=True, slots=True)
class InputFile:
    name: str
    data: bytes


def decode_file(param: str, filename: object, data: object, index: int) -> InputFile:
    """One file part's content; ApiError 400 naming `param` (the part's field path)."""
    if not isinstance(data, str) or not data:
        raise bad_request("a file part needs `file_data` (base64 or a data: URL)",
                          f"{param}.file_data", "invalid_file")  # fmt: skip
    name = _file_name(param, filename, index)
    payload = _DATA_URL.sub("", data, count=1)
    if payload.startswith("data:"):
        raise bad_request("file_data is a data: URL without base64 content",
                          f"{param}.file_data", "invalid_file")  # fmt: skip
    try:
        content = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as error:
        raise bad_request(f"file_data is not valid base64: {error}",
                          f"{param}.file_data", "invalid_file") from error  # fmt: skip
    return InputFile(name, content)


def _file_name(param: str, filename: object, index: int) -> str:
    if filename is None:
        return f"file-{index + 1}"
    if not isinstance(filename, str):
        raise bad_request("filename must be a string", f"{param}.filename", "invalid_file")
    name = filename.strip()
    if (
        not name
        or len(name) > MAX_NAME
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name in (".", "..")
    ):
        raise bad_request(
            f"filename {filename!r} is not a plain file name (no folders, at most {MAX_NAME} "
            "characters)",
            f"{param}.filename",
            "invalid_file",
        )
    return name


def unique_files(files: list[InputFile]) -> dict[str, bytes]:
    """Name -> content; a repeated name gets a -2, -3 ... suffix before its extension."""
    named: dict[str, bytes] = {}
    for item in files:
        name = item.name
        stem, dot, ext = name.rpartition(".")
        base, suffix = (stem, f".{ext}") if dot and stem else (name, "")
        number = 2
        while name in named:
            name = f"{base}-{number}{suffix}"
            number += 1
        named[name] = item.data
    return named


def output_file(root: Path, name: str) -> Path | None:
    """The served file `name` below `root`, or None when it is not a regular file there."""
    normal = posixpath.normpath(name)
    if normal.startswith(("/", "../")) or normal in ("..", "."):
        return None
    path = root / normal
    try:
        resolved = path.resolve(strict=True)
    except OSError:
        return None
    if not resolved.is_relative_to(root.resolve()) or not resolved.is_file():
        return None
    return resolved
