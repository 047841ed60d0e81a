"""RestoreTree's unpacking on real files: what the fast path writes, and an abandoned restore."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import tarfile
import types
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet_runtime import tree_unpack
from sandfleet_runtime.errors import InvalidArgumentError
from sandfleet_runtime.tree_archive import restore_tree

DIR_MTIME = 1_600_000_000
FILE_MTIME = 1_500_000_000


@pytest.fixture(params=["stdlib", "fallback"])
def tar_filter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both archive filters (the fallback is what runtime images without one run)."""
    if request.param == "fallback":
        monkeypatch.setattr(tree_unpack, "_STDLIB_DATA_FILTER", None)
    return str(request.param)


def _tar(*members: tuple[str, bytes, bytes | str]) -> bytes:
    """(name, type, content or link target) each, with fixed modes and times."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.DIRTYPE:
                info.mode, info.mtime = 0o750, DIR_MTIME
                archive.addfile(info)
            elif kind == tarfile.SYMTYPE:
                info.linkname = str(data)
                archive.addfile(info)
            else:
                content = data if isinstance(data, bytes) else data.encode()
                info.mode, info.mtime, info.size = 0o640, FILE_MTIME, len(content)
                archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


async def _chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_files_and_directories_keep_modes_and_times_and_need_no_directory_entries(
    tmp_path: Path, tar_filter: str
) -> None:
    big = os.urandom(3 * tree_unpack.COPY_BYTES + 7)  # several large writes
    archive = _tar(
        ("pkg", tarfile.DIRTYPE, b""),
        ("pkg/big.bin", tarfile.REGTYPE, big),
        ("pkg/small.txt", tarfile.REGTYPE, "small"),
        ("deep/er/unlisted.txt", tarfile.REGTYPE, "no directory entries for me"),
    )

    restored = await restore_tree(tmp_path, _chunks(archive, 64 * 1024))

    assert restored == tree_unpack.RestoredTree(entries=4, bytes=len(big) + 5 + 27)
    assert (tmp_path / "pkg" / "big.bin").read_bytes() == big
    assert (tmp_path / "deep" / "er" / "unlisted.txt").read_text() == "no directory entries for me"
    small = (tmp_path / "pkg" / "small.txt").stat()
    assert (small.st_mode & 0o777, small.st_mtime) == (0o640, FILE_MTIME)
    # Set after its files were written, so the directory's time is the archive's.
    assert (tmp_path / "pkg").stat().st_mtime == DIR_MTIME
    if tar_filter == "fallback":  # tarfile's own filter leaves directory modes alone
        assert (tmp_path / "pkg").stat().st_mode & 0o777 == 0o750


async def test_a_file_after_a_link_of_its_name_replaces_the_link_instead_of_writing_through(
    tmp_path: Path, tar_filter: str
) -> None:
    archive = _tar(
        ("target.txt", tarfile.REGTYPE, "kept"),
        ("alias", tarfile.SYMTYPE, "target.txt"),
        ("alias", tarfile.REGTYPE, "the file itself"),
    )

    await restore_tree(tmp_path, _chunks(archive))

    assert not (tmp_path / "alias").is_symlink()
    assert (tmp_path / "alias").read_text() == "the file itself"
    assert (tmp_path / "target.txt").read_text() == "kept"


async def test_an_archive_cut_inside_a_file_is_refused_and_changes_nothing(
    tmp_path: Path, tar_filter: str
) -> None:
    (tmp_path / "before.txt").write_text("before")
    archive = _tar(("cut.bin", tarfile.REGTYPE, os.urandom(200_000)))

    with pytest.raises(InvalidArgumentError, match="not a readable tar archive"):
        await restore_tree(tmp_path, _chunks(archive[:100_000]))

    assert sorted(os.listdir(tmp_path)) == ["before.txt"]


async def test_an_abandoned_restore_stops_its_thread_and_leaves_the_tree(tmp_path: Path) -> None:
    (tmp_path / "before.txt").write_text("before")
    archive = _tar(("big.bin", tarfile.REGTYPE, os.urandom(500_000)))
    sent_half = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        yield archive[:250_000]
        sent_half.set()
        await asyncio.Event().wait()  # a client that never sends the rest
        yield b""

    restore = asyncio.ensure_future(restore_tree(tmp_path, stalls()))
    await asyncio.wait_for(sent_half.wait(), 30)
    assert _unpacking()  # the thread asked for the next chunk, and waits for it
    restore.cancel()

    with pytest.raises(asyncio.CancelledError):
        await restore
    assert not _unpacking()
    assert sorted(os.listdir(tmp_path)) == ["before.txt"]  # no staging directory left


def _unpacking() -> bool:
    """Whether a thread is inside tree_unpack.unpack."""
    for frame in sys._current_frames().values():
        walker: types.FrameType | None = frame
        while walker is not None:
            if walker.f_code is tree_unpack.unpack.__code__:
                return True
            walker = walker.f_back
    return False
