"""Chunked upload, download and listing against real files in tmp_path."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import stat
import tracemalloc
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from sandfleet_runtime.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from sandfleet_runtime.files import (
    Entry,
    list_tree,
    open_for_download,
    read_chunks,
    write_file,
)

KiB = 1024
MiB = 1024 * KiB


async def stream(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def failing_after(chunks: Iterable[bytes], error: Exception) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
    raise error


async def upload(path: Path, data: bytes, **options: bool | int) -> None:
    settings: dict[str, bool | int] = {"mode": 0, "make_parents": False, "overwrite": False}
    settings.update(options)
    await write_file(
        str(path),
        stream([data]),
        mode=int(settings["mode"]),
        make_parents=bool(settings["make_parents"]),
        overwrite=bool(settings["overwrite"]),
    )


async def test_a_100_mb_file_round_trips_in_64_kib_chunks_with_bounded_memory(
    tmp_path: Path,
) -> None:
    chunk_count = 1600  # 1600 x 64 KiB = 100 MiB
    sent = hashlib.sha256()
    generator = random.Random(2601)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(chunk_count):
            chunk = generator.randbytes(64 * KiB)
            sent.update(chunk)
            yield chunk

    path = tmp_path / "payload.bin"
    tracemalloc.start()
    try:
        result = await write_file(
            str(path), chunks(), mode=0o600, make_parents=False, overwrite=False
        )
        _, upload_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        info, f = open_for_download(str(path))
        received = hashlib.sha256()
        received_bytes = 0
        with f:
            async for chunk in read_chunks(f, 64 * KiB):
                assert len(chunk) == 64 * KiB
                received.update(chunk)
                received_bytes += len(chunk)
        _, download_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        path.unlink(missing_ok=True)  # pytest keeps recent tmp dirs; 100 MiB each adds up
    assert result.size == info.size == received_bytes == chunk_count * 64 * KiB
    assert result.sha256 == sent.hexdigest() == received.hexdigest()
    assert info.mode == 0o600
    # The file is 100 MiB; a batch (1 MiB) plus a chunk or two is all that may be held.
    assert upload_peak < 4 * MiB
    assert download_peak < 4 * MiB


async def test_mode_bits_are_applied_and_an_executable_stays_executable(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    await upload(script, b"#!/bin/sh\necho ok\n", mode=0o755)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert os.access(script, os.X_OK)
    info, f = open_for_download(str(script))
    f.close()
    assert info.mode == 0o755


async def test_mode_zero_means_644_and_file_type_bits_are_ignored(tmp_path: Path) -> None:
    await upload(tmp_path / "a.txt", b"a", mode=0)
    await upload(tmp_path / "b.txt", b"b", mode=0o100640)  # a full st_mode from a stat
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o640


async def test_a_failed_upload_leaves_no_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "dir" / "out.bin"
    target.parent.mkdir()
    with pytest.raises(ConnectionResetError):
        await write_file(
            str(target),
            failing_after([b"x" * MiB] * 3, ConnectionResetError("client went away")),
            mode=0,
            make_parents=False,
            overwrite=False,
        )
    assert os.listdir(target.parent) == []


async def test_a_failed_overwrite_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_bytes(b"old")
    with pytest.raises(ConnectionResetError):
        await write_file(
            str(target),
            failing_after([b"new"], ConnectionResetError()),
            mode=0,
            make_parents=False,
            overwrite=True,
        )
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.txt"]


async def test_a_cancelled_upload_leaves_no_temporary_file(tmp_path: Path) -> None:
    sent_some = asyncio.Event()
    never = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        yield b"x" * (3 * MiB)
        sent_some.set()
        await never.wait()
        yield b"unreachable"

    task = asyncio.create_task(
        write_file(str(tmp_path / "out.bin"), stalls(), mode=0, make_parents=False, overwrite=False)
    )
    await sent_some.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert os.listdir(tmp_path) == []


async def test_an_upload_over_max_bytes_is_refused_and_removed(tmp_path: Path) -> None:
    with pytest.raises(ResourceExhaustedError, match="exceeds the limit of 10 bytes"):
        await write_file(
            str(tmp_path / "out.bin"),
            stream([b"123456", b"789012"]),
            mode=0,
            make_parents=False,
            overwrite=False,
            max_bytes=10,
        )
    assert os.listdir(tmp_path) == []


async def test_an_existing_file_is_only_replaced_with_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_bytes(b"old")
    with pytest.raises(AlreadyExistsError):
        await upload(target, b"new")
    assert target.read_bytes() == b"old"
    await upload(target, b"new", overwrite=True)
    assert target.read_bytes() == b"new"


async def test_a_file_that_appears_during_the_upload_is_not_clobbered(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"

    async def racing() -> AsyncIterator[bytes]:
        yield b"mine"
        target.write_bytes(b"theirs")

    with pytest.raises(AlreadyExistsError):
        await write_file(str(target), racing(), mode=0, make_parents=False, overwrite=False)
    assert target.read_bytes() == b"theirs"
    assert os.listdir(tmp_path) == ["a.txt"]


async def test_a_directory_is_never_a_valid_upload_target(tmp_path: Path) -> None:
    with pytest.raises(FailedPreconditionError, match="is a directory"):
        await upload(tmp_path, b"x", overwrite=True)
    with pytest.raises(InvalidArgumentError, match="names a directory"):
        await write_file(
            f"{tmp_path}/sub/", stream([b"x"]), mode=0, make_parents=True, overwrite=False
        )


async def test_missing_parents_are_created_only_with_make_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.txt"
    with pytest.raises(NotFoundError, match="set make_parents"):
        await upload(target, b"x")
    await upload(target, b"x", make_parents=True)
    assert target.read_bytes() == b"x"


async def test_an_upload_reports_size_and_sha256(tmp_path: Path) -> None:
    result = await write_file(
        str(tmp_path / "a.txt"),
        stream([b"hello ", b"", b"world"]),
        mode=0,
        make_parents=False,
        overwrite=False,
    )
    assert (result.path, result.size) == (str(tmp_path / "a.txt"), 11)
    assert result.sha256 == hashlib.sha256(b"hello world").hexdigest()


async def test_relative_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not absolute"):
        await upload(Path("rel.txt"), b"x")
    with pytest.raises(InvalidArgumentError, match="not absolute"):
        open_for_download("rel.txt")
    with pytest.raises(InvalidArgumentError, match="not absolute"):
        list_tree("rel")


async def test_download_yields_the_exact_bytes_with_a_short_last_chunk(tmp_path: Path) -> None:
    data = bytes(range(256)) * 41  # 10496 bytes
    (tmp_path / "a.bin").write_bytes(data)
    info, f = open_for_download(str(tmp_path / "a.bin"))
    with f:
        chunks = [chunk async for chunk in read_chunks(f, 1000)]
    assert info.size == len(data)
    assert [len(c) for c in chunks] == [1000] * 10 + [496]
    assert b"".join(chunks) == data


async def test_an_empty_file_downloads_as_no_chunks(tmp_path: Path) -> None:
    (tmp_path / "empty").touch()
    info, f = open_for_download(str(tmp_path / "empty"))
    with f:
        assert [chunk async for chunk in read_chunks(f, 64 * KiB)] == []
    assert info.size == 0


async def test_a_non_positive_chunk_size_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    _, f = open_for_download(str(tmp_path / "a"))
    with f, pytest.raises(InvalidArgumentError, match="chunk_size"):
        _ = [chunk async for chunk in read_chunks(f, 0)]


def test_download_refuses_missing_paths_directories_and_fifos(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        open_for_download(str(tmp_path / "missing"))
    with pytest.raises(FailedPreconditionError, match="is a directory"):
        open_for_download(str(tmp_path))
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(FailedPreconditionError, match="not a regular file"):
        open_for_download(str(tmp_path / "pipe"))


def make_tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "src" / "main.py").write_text("print()\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "README.md").write_text("# hi\n")
    os.chmod(root / "README.md", 0o600)
    (root / "link").symlink_to(root / "src")


def test_list_tree_walks_depth_first_with_sorted_names(tmp_path: Path) -> None:
    make_tree(tmp_path)
    entries, truncated = list_tree(str(tmp_path))
    assert not truncated
    assert [(e.path.removeprefix(f"{tmp_path}/"), e.is_dir) for e in entries] == [
        (".git", True),
        (".git/HEAD", False),
        ("README.md", False),
        ("link", False),  # a symlink, listed and not followed
        ("src", True),
        ("src/main.py", False),
        ("src/pkg", True),
        ("src/pkg/mod.py", False),
    ]
    readme = next(e for e in entries if e.path.endswith("README.md"))
    assert readme == Entry(str(tmp_path / "README.md"), False, 5, 0o600)
    assert next(e for e in entries if e.path.endswith("/src")).size == 0


def test_list_tree_honours_max_depth_hidden_names_and_the_entry_cap(tmp_path: Path) -> None:
    make_tree(tmp_path)
    shallow, _ = list_tree(str(tmp_path), max_depth=1, include_hidden=False)
    assert [e.path.removeprefix(f"{tmp_path}/") for e in shallow] == ["README.md", "link", "src"]
    capped, truncated = list_tree(str(tmp_path), max_entries=3)
    assert truncated
    assert len(capped) == 3
    exact, truncated = list_tree(str(tmp_path), max_entries=8)
    assert not truncated
    assert len(exact) == 8


def test_list_tree_of_a_file_lists_the_file_and_of_a_missing_path_fails(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"abc")
    os.chmod(tmp_path / "a.txt", 0o644)
    entries, truncated = list_tree(str(tmp_path / "a.txt"))
    assert entries == [Entry(str(tmp_path / "a.txt"), False, 3, 0o644)]
    assert not truncated
    with pytest.raises(NotFoundError):
        list_tree(str(tmp_path / "missing"))


async def test_a_temporary_file_outlives_a_cancelled_write_still_running_in_its_thread(
    tmp_path: Path,
) -> None:
    from sandfleet_runtime.files import _Upload

    upload = _Upload(str(tmp_path / "out.bin"))
    write_in_thread: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    upload._in_flight = write_in_thread  # what flush() holds while the worker thread writes
    upload.discard()
    # The descriptor must stay open (and the file in place) until the thread is done with it.
    os.fstat(upload.fd)
    assert os.listdir(tmp_path) == [os.path.basename(upload.temp_path)]
    write_in_thread.set_result(None)
    await asyncio.sleep(0)  # one loop turn runs the done-callbacks
    assert os.listdir(tmp_path) == []
