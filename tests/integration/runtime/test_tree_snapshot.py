"""SnapshotTree / RestoreTree between two real runtimes: round trip, baseline, hostile archives."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet_runtime import tree_unpack
from tests.integration.runtime.tree_support import BINARY, make_sample_tree, tree_picture
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


@pytest.fixture(params=["stdlib", "fallback"])
def tar_filter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both of the runtime's archive filters: tarfile's `data` filter, and its own for a
    Python without one (Debian's 3.11.2 in runtime images). The runtimes run in-process,
    so forcing the fallback here forces it on them."""
    if request.param == "fallback":
        monkeypatch.setattr(tree_unpack, "_STDLIB_DATA_FILTER", None)
    return str(request.param)


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[tuple[RuntimeClient, Path]]:
    root = tmp_path / "source"
    make_sample_tree(root)
    async with running_runtime(root) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        yield client, root
        await client.close()


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[tuple[RuntimeClient, Path]]:
    root = tmp_path / "target"
    root.mkdir()
    (root / "old-file.txt").write_text("from the image of the target\n")
    (root / "old-dir").mkdir()
    async with running_runtime(root) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        yield client, root
        await client.close()


async def test_snapshot_restores_into_another_sandbox_byte_for_byte(
    source: tuple[RuntimeClient, Path], target: tuple[RuntimeClient, Path], tar_filter: str
) -> None:
    source_client, source_root = source
    target_client, target_root = target

    entries, size = await target_client.restore(source_client.snapshot())

    assert tree_picture(target_root) == tree_picture(source_root)
    assert not (target_root / "old-file.txt").exists()
    assert entries == len(tree_picture(source_root))
    assert size == len(BINARY) + len("first line\nsecond line\n") + len("#!/bin/sh\necho run\n") + 1


async def test_links_out_of_the_tree_come_back_as_the_links_they_were(
    target: tuple[RuntimeClient, Path], tmp_path: Path, tar_filter: str
) -> None:
    # A virtualenv made in the tree links its interpreter to the system's by absolute path;
    # a sandbox that made one must still resume. The links are restored, never followed.
    client, root = target
    archive = _tar(
        (_member("venv/bin", tarfile.DIRTYPE), b""),
        (_member("venv/bin/python", tarfile.SYMTYPE, "/usr/bin/python3"), b""),
        (_member("shared", tarfile.SYMTYPE, "../../elsewhere"), b""),
        _OK,
    )

    async def chunks() -> AsyncIterator[bytes]:
        yield archive

    await client.restore(chunks())

    assert os.readlink(root / "venv" / "bin" / "python") == "/usr/bin/python3"
    assert os.readlink(root / "shared") == "../../elsewhere"
    assert (root / "fine.txt").read_text() == "fine"
    assert not (tmp_path / "elsewhere").exists()


async def test_snapshot_to_a_file_and_restore_as_baseline_makes_reset_return_there(
    source: tuple[RuntimeClient, Path], target: tuple[RuntimeClient, Path], tmp_path: Path
) -> None:
    source_client, source_root = source
    target_client, target_root = target
    archive = tmp_path / "snap" / "tree.tar"
    written = await source_client.snapshot_to(archive)
    assert written == archive.stat().st_size > len(BINARY)

    await target_client.restore(archive, as_baseline=True)
    await target_client.run_command("rm -r src; echo junk > junk.txt")
    await target_client.reset()

    assert tree_picture(target_root) == tree_picture(source_root)


async def test_restore_without_as_baseline_is_undone_by_reset(
    source: tuple[RuntimeClient, Path], target: tuple[RuntimeClient, Path]
) -> None:
    source_client, _ = source
    target_client, target_root = target
    before = tree_picture(target_root)
    await target_client.restore(source_client.snapshot())

    await target_client.reset()

    assert tree_picture(target_root) == before


async def test_a_multi_chunk_tree_streams_and_an_abandoned_snapshot_stops_cleanly(
    source: tuple[RuntimeClient, Path], target: tuple[RuntimeClient, Path]
) -> None:
    source_client, source_root = source
    target_client, target_root = target
    await source_client.run_command("head -c 12000000 /dev/urandom > big.bin; mkdir -p d/e")

    async with contextlib.aclosing(source_client.snapshot()) as abandoned:
        assert len(await anext(abandoned)) > 0  # then closed after one chunk
    chunk_sizes: list[int] = []

    async def counted() -> AsyncIterator[bytes]:
        async for chunk in source_client.snapshot():
            chunk_sizes.append(len(chunk))
            yield chunk

    await target_client.restore(counted())

    assert len(chunk_sizes) > 40  # streamed in pieces, never as one message
    assert max(chunk_sizes) <= 256 * 1024
    assert tree_picture(target_root) == tree_picture(source_root)


def _names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


_OK = (_member("fine.txt"), b"fine")
_HOSTILE = {
    "absolute path": (_tar(_OK, (_member("/tmp/sandfleet-evil-abs"), b"x")), "absolute path"),
    "dot-dot": (_tar(_OK, (_member("sub/../../../sandfleet-evil-up"), b"x")), "'..'"),
    # A link out of the tree is restored as a link (see the test below); what is refused is
    # a later member written through it, or a link placed through one.
    "a file written through an absolute symlink": (
        _tar(
            _OK,
            (_member("escape", tarfile.SYMTYPE, "/tmp"), b""),
            (_member("escape/sandfleet-evil-abs"), b"x"),
        ),
        "outside the destination",
    ),
    "a file written through a relative symlink out": (
        _tar(
            _OK,
            (_member("up", tarfile.SYMTYPE, "../../../../../../../../tmp"), b""),
            (_member("up/sandfleet-evil-abs"), b"x"),
        ),
        "outside the destination",
    ),
    "a file that replaces an outward symlink": (
        _tar(
            _OK,
            (_member("passwd", tarfile.SYMTYPE, "/tmp/sandfleet-evil-abs"), b""),
            (_member("passwd"), b"x"),
        ),
        "outside the destination",
    ),
    "a symlink placed through an outward symlink": (
        _tar(
            _OK,
            (_member("escape", tarfile.SYMTYPE, "/tmp"), b""),
            (_member("escape/sandfleet-evil-abs", tarfile.SYMTYPE, "/etc/passwd"), b""),
        ),
        "outside the destination",
    ),
    "hard link escaping": (
        _tar(_OK, (_member("hard", tarfile.LNKTYPE, "/etc/passwd"), b"")),
        "unsafe",
    ),
    "character device": (_tar(_OK, (_member("null", tarfile.CHRTYPE), b"")), "unsafe"),
    "fifo": (_tar(_OK, (_member("pipe", tarfile.FIFOTYPE), b"")), "unsafe"),
    "not a tar": (b"this is not an archive at all" * 100, "not a readable tar"),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
async def test_a_hostile_archive_is_refused_and_changes_nothing(
    case: str, target: tuple[RuntimeClient, Path], tmp_path: Path, tar_filter: str
) -> None:
    client, root = target
    data, message = _HOSTILE[case]
    before = tree_picture(root)
    outside_before = _names(tmp_path)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    with pytest.raises(ToolError, match=re.escape(message)) as refused:
        await client.restore(chunks())

    assert refused.value.code == "INVALID_ARGUMENT"
    assert "working tree is unchanged" in str(refused.value)
    assert tree_picture(root) == before  # no staging directory left behind either
    assert _names(tmp_path) == outside_before
    assert "sandfleet-evil-abs" not in _names(Path("/tmp"))
