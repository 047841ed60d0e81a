"""SnapshotTree / RestoreTree with extra roots (the home directory, a scratch directory standing
in for /tmp) on a real runtime: round trip, what is left out, refusals; GetStats's sessions."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet_runtime import tree_archive
from tests.integration.runtime.tree_support import make_sample_tree, tree_picture
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[tuple[RuntimeClient, Path]]:
    """A runtime whose working tree is `work`, with HOME `home` and a `scratch` directory."""
    for name in ("work", "home", "scratch"):
        make_sample_tree(tmp_path / name)
    # A hard link across two roots: each root is restored on its own, so it becomes a copy.
    os.link(tmp_path / "home" / "notes.txt", tmp_path / "scratch" / "home-notes-link.txt")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    async with running_runtime(tmp_path / "work", shell_env=tuple(env.items())) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        yield client, tmp_path
        await client.close()


async def _archive(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return archive.getnames()


async def _replay(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_extra_roots_round_trip_and_are_named_absolutely(
    sandbox: tuple[RuntimeClient, Path],
) -> None:
    client, base = sandbox
    trees = {name: tree_picture(base / name) for name in ("work", "home", "scratch")}
    asked = ["~", str(base / "scratch"), str(base / "missing"), str(base / "work" / "src")]

    roots, chunks = await client.snapshot_with_roots(asked)
    data = await _archive(chunks)

    # The missing directory and the one inside the working tree are left out.
    assert roots == (str(base / "home"), str(base / "scratch"))
    names = _names(data)
    assert "notes.txt" in names
    assert f"{base}/home/notes.txt" in names
    assert f"{base}/scratch/src/data.bin" in names
    for name in ("work", "home", "scratch"):  # what a resume replaces: changed and added
        (base / name / "notes.txt").write_text("changed after the snapshot\n")
        (base / name / "added.txt").write_text("new\n")

    entries, _ = await client.restore(_replay(data), extra_roots=roots)

    assert entries == len(names)
    for name, picture in trees.items():
        assert tree_picture(base / name) == picture, name
    copied = base / "scratch" / "home-notes-link.txt"
    assert copied.stat().st_ino != (base / "home" / "notes.txt").stat().st_ino


async def test_an_absolute_member_outside_the_restores_roots_changes_nothing(
    sandbox: tuple[RuntimeClient, Path],
) -> None:
    client, base = sandbox
    roots, chunks = await client.snapshot_with_roots(["~", str(base / "scratch")])
    data = await _archive(chunks)
    (base / "home" / "kept.txt").write_text("kept\n")
    before = {name: tree_picture(base / name) for name in ("work", "home", "scratch")}

    with pytest.raises(ToolError, match="outside the extra roots"):
        await client.restore(_replay(data), extra_roots=roots[:1])  # scratch not listed
    with pytest.raises(ToolError, match="absolute path"):
        await client.restore(_replay(data))  # as a runtime before extra roots sees it

    assert {name: tree_picture(base / name) for name in before} == before
    assert not [p for p in (base / "scratch").iterdir() if p.name.startswith(".sandfleet")]


async def test_a_kept_path_is_neither_replaced_nor_restored(tmp_path: Path) -> None:
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    (scratch / "driver").mkdir(parents=True)
    (scratch / "driver" / "live").write_text("the runtime's own\n")
    (scratch / "file").write_text("before\n")
    data = await _archive(tree_archive.snapshot_tree(work, (scratch,), skip=()))
    (scratch / "driver" / "live").write_text("changed by the runtime since\n")

    await tree_archive.restore_tree(work, _replay(data), (scratch,), keep=(scratch / "driver",))

    assert (scratch / "driver" / "live").read_text() == "changed by the runtime since\n"
    assert (scratch / "file").read_text() == "before\n"
    skipped = await _archive(tree_archive.snapshot_tree(work, (scratch,), (scratch / "driver",)))
    assert f"{scratch}/file" in _names(skipped)
    assert f"{scratch}/driver" not in _names(skipped)


async def test_stats_name_the_live_bash_sessions(sandbox: tuple[RuntimeClient, Path]) -> None:
    client, _ = sandbox
    await client.run_command("true", session="build")
    await client.run_command("true")

    assert (await client.stats()).bash_session_names == ("build", "default")
