"""A task's local input files read as text for spec.files (the cluster backend inlines them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from sandfleet.fleet.manifests import MAX_INLINE_FILES_BYTES, ManifestError


@dataclasses.dataclass(frozen=True, slots=True)
class TextInputs:
    contents: dict[str, str]
    """Sandbox name (as in Task.files) -> UTF-8 text."""
    modes: dict[str, int]
    """Permission bits of the inputs that came from local files."""


def read_text_inputs(
    files: Mapping[str, Path | bytes], *, max_total_bytes: int = MAX_INLINE_FILES_BYTES
) -> TextInputs:
    """Read every input as UTF-8 text, refusing binary files and inputs over the budget.

    Blocking (reads local files): call it from a worker thread. Raises ManifestError with a
    message for the user.
    """
    contents: dict[str, str] = {}
    modes: dict[str, int] = {}
    total = 0
    for name, source in files.items():
        if isinstance(source, Path):
            data, mode = _read_local(name, source, max_total_bytes - total, max_total_bytes)
            modes[name] = mode
        else:
            data = bytes(source)
        total += len(data)
        if total > max_total_bytes:
            raise _over_budget(max_total_bytes)
        try:
            contents[name] = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ManifestError(
                f"input file {name} is not UTF-8 text; the kubernetes backend sends inputs "
                "inline in the SandboxSession, which holds text only (put binary inputs in "
                "the image or a ConfigMap, or use the local backend)"
            ) from error
    return TextInputs(contents=contents, modes=modes)


def _read_local(name: str, source: Path, remaining: int, limit: int) -> tuple[bytes, int]:
    try:
        status = source.stat()
        if status.st_size > remaining:
            # Refuse before reading: a large file is not worth loading just to say no.
            raise _over_budget(limit)
        return source.read_bytes(), status.st_mode & 0o777
    except OSError as error:
        raise ManifestError(
            f"cannot read the input file {source} (for {name}): {error.strerror or error}"
        ) from error


def _over_budget(limit: int) -> ManifestError:
    return ManifestError(
        f"the input files hold more than {limit} bytes, the most a SandboxSession carries "
        "inline (put larger inputs in the image or a ConfigMap, or use the local backend)"
    )
