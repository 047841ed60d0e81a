"""The directory trajectory store: layout, references, name validation, latest, prune, snapshots."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sandfleet.api.trajectories import TrajectoryKey, TrajectoryNameError, parse_reference
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from sandfleet.trajectory.reader import read_trajectory
from sandfleet.trajectory.store import read_chunks, snapshot
from sandfleet.trajectory.writer import TrajectoryWriter

UID_OLD = "0b5c9c1e-1111-4d2e-9a6f-000000000001"
UID_NEW = "0b5c9c1e-2222-4d2e-9a6f-000000000002"


def write_file(path: Path, content: bytes, *, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    if age_s:
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return path


def tree(root: Path) -> list[str]:
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*"))


def test_a_run_is_written_below_namespace_and_name_as_uid_jsonl(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)

    path = store.writer_path("team-a", "review.batch-7", UID_OLD)

    assert path == tmp_path / "team-a" / "review.batch-7" / f"{UID_OLD}.jsonl"


def test_the_reference_is_relative_to_the_root_and_resolves_back_to_the_file(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)

    reference = store.reference("team-a", "s1", UID_OLD)

    assert reference == f"dir:team-a/s1/{UID_OLD}.jsonl"
    assert parse_reference(reference) == TrajectoryKey("team-a", "s1", UID_OLD)
    assert store.resolve(reference) == store.writer_path("team-a", "s1", UID_OLD)


@pytest.mark.parametrize(
    "reference",
    [
        "file:///etc/passwd",
        "dir:../../etc/passwd.jsonl",
        "dir:ns/name/uid.txt",
        "dir:ns/name/../uid.jsonl",
        "dir:ns/uid.jsonl",
        "ns/name/uid.jsonl",
    ],
)
def test_anything_but_a_store_reference_is_rejected(reference: str) -> None:
    with pytest.raises(TrajectoryNameError):
        parse_reference(reference)


@pytest.mark.parametrize(
    ("namespace", "name", "uid"),
    [
        ("..", "s", UID_OLD),
        ("ns", "..", UID_OLD),
        ("ns", "s", ".."),
        ("ns", "a/b", UID_OLD),
        ("ns", "s", "../../x"),
        ("Team", "s", UID_OLD),
        ("ns", "s_1", UID_OLD),
        ("ns", "a..b", UID_OLD),
        ("ns", ".hidden", UID_OLD),
        ("ns", "s", "a..b"),
        ("ns", "s", ".lost-1"),
        ("a.b", "s", UID_OLD),
        ("", "s", UID_OLD),
        ("ns", "", UID_OLD),
        ("x" * 64, "s", UID_OLD),
        ("ns", "x" * 254, UID_OLD),
        ("ns", "s\n", UID_OLD),
    ],
)
async def test_names_that_are_not_kubernetes_names_never_reach_the_file_system(
    tmp_path: Path, namespace: str, name: str, uid: str
) -> None:
    store = DirectoryTrajectoryStore(tmp_path / "root")

    with pytest.raises(TrajectoryNameError):
        store.writer_path(namespace, name, uid)
    with pytest.raises(TrajectoryNameError):
        store.reference(namespace, name, uid)
    with pytest.raises(TrajectoryNameError):
        await store.path(namespace, name, uid)
    if uid == UID_OLD:
        with pytest.raises(TrajectoryNameError):
            await store.latest(namespace, name)
    assert not (tmp_path / "root").exists()


def test_the_longest_kubernetes_names_are_accepted(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    name = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters

    path = store.writer_path("n" * 63, name, UID_OLD)

    assert path.parent.name == name


async def test_latest_is_the_most_recently_written_run_not_the_largest_uid(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    older = write_file(store.writer_path("ns", "s", UID_NEW), b"{}\n", age_s=60)
    newer = write_file(store.writer_path("ns", "s", UID_OLD), b"{}\n", age_s=1)

    assert await store.latest("ns", "s") == newer

    os.utime(older)  # the older run is written to again: now it is the latest
    assert await store.latest("ns", "s") == older


async def test_a_run_set_aside_as_uid_lost_n_is_a_run_of_its_own(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    lost = write_file(store.writer_path("ns", "s", f"{UID_OLD}.lost-1"), b"{}\n", age_s=7200)

    assert await store.latest("ns", "s") == lost
    assert await store.path("ns", "s", f"{UID_OLD}.lost-1") == lost
    assert (await snapshot(lost)).uid == f"{UID_OLD}.lost-1"
    assert await store.prune(older_than_s=3600) == 1
    assert tree(tmp_path) == []


async def test_latest_ignores_files_and_folders_that_are_not_trajectories(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    folder = tmp_path / "ns" / "s"
    real = write_file(store.writer_path("ns", "s", UID_OLD), b"{}\n", age_s=60)
    write_file(folder / "notes.txt", b"x")
    write_file(folder / "Upper.jsonl", b"x")
    (folder / "dir.jsonl").mkdir()

    assert await store.latest("ns", "s") == real


async def test_latest_and_path_are_none_when_nothing_is_stored(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path / "never-created")

    assert await store.latest("ns", "s") is None
    assert await store.path("ns", "s", UID_OLD) is None


async def test_path_finds_one_run_by_uid(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    stored = write_file(store.writer_path("ns", "s", UID_OLD), b"{}\n")

    assert await store.path("ns", "s", UID_OLD) == stored
    assert await store.path("ns", "s", UID_NEW) is None


async def test_prune_deletes_old_runs_keeps_fresh_ones_and_removes_emptied_folders(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    write_file(store.writer_path("gone", "s1", UID_OLD), b"{}\n", age_s=7200)
    write_file(store.writer_path("gone", "s2", UID_OLD), b"{}\n", age_s=7200)
    write_file(store.writer_path("kept", "old", UID_OLD), b"{}\n", age_s=7200)
    write_file(store.writer_path("kept", "mixed", UID_OLD), b"{}\n", age_s=7200)
    fresh = write_file(store.writer_path("kept", "mixed", UID_NEW), b"{}\n", age_s=10)
    stray = write_file(tmp_path / "kept" / "odd" / "README", b"not a trajectory", age_s=7200)

    deleted = await store.prune(older_than_s=3600)

    assert deleted == 4
    assert tree(tmp_path) == [
        "kept",
        "kept/mixed",
        f"kept/mixed/{UID_NEW}.jsonl",
        "kept/odd",
        "kept/odd/README",
    ]
    assert fresh.exists()
    assert stray.exists()


async def test_prune_keeps_old_files_that_writers_hold_open(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    quiet = write_file(store.writer_path("ns", "waiting", UID_OLD), b"{}\n", age_s=7200)
    done = write_file(store.writer_path("ns", "done", UID_OLD), b"{}\n", age_s=7200)

    deleted = await store.prune(
        older_than_s=3600, keep={store.writer_path("ns", "waiting", UID_OLD)}
    )

    assert deleted == 1
    assert quiet.exists()
    assert not done.exists()
    assert tree(tmp_path) == ["ns", "ns/waiting", f"ns/waiting/{UID_OLD}.jsonl"]


async def test_prune_keeps_files_held_open_by_writing_until_the_block_ends(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    path = store.writer_path("ns", "waiting", UID_OLD)
    quiet = write_file(path, b"{}\n", age_s=7200)

    with store.writing(path):
        assert await store.prune(older_than_s=3600) == 0
        assert quiet.exists()
    assert await store.prune(older_than_s=3600) == 1
    assert not quiet.exists()


async def test_prune_of_an_empty_or_missing_store_deletes_nothing(tmp_path: Path) -> None:
    assert await DirectoryTrajectoryStore(tmp_path / "missing").prune(older_than_s=0) == 0
    assert await DirectoryTrajectoryStore(tmp_path).prune(older_than_s=0) == 0


async def test_a_pruned_session_folder_can_be_written_again(tmp_path: Path) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    write_file(store.writer_path("ns", "s", UID_OLD), b"{}\n", age_s=7200)
    await store.prune(older_than_s=3600)

    with TrajectoryWriter(store.writer_path("ns", "s", UID_NEW)) as writer:
        writer.write({"kind": "meta"})

    assert await store.latest("ns", "s") == store.writer_path("ns", "s", UID_NEW)


async def test_a_snapshot_holds_only_whole_records(tmp_path: Path) -> None:
    whole = b'{"kind": "meta"}\n{"kind": "message"}\n'
    path = write_file(tmp_path / f"{UID_OLD}.jsonl", whole + b'{"kind": "obs')

    taken = await snapshot(path)

    assert (taken.size, taken.uid) == (len(whole), UID_OLD)
    assert b"".join([chunk async for chunk in read_chunks(taken)]) == whole


async def test_a_record_being_written_larger_than_the_tail_block_is_left_out(
    tmp_path: Path,
) -> None:
    whole = b'{"kind": "meta"}\n'
    half_written = b'{"kind": "observation", "output": "' + b"x" * 300_000
    path = write_file(tmp_path / f"{UID_OLD}.jsonl", whole + half_written)

    assert (await snapshot(path)).size == len(whole)


async def test_a_file_without_a_whole_record_snapshots_empty(tmp_path: Path) -> None:
    path = write_file(tmp_path / f"{UID_OLD}.jsonl", b'{"kind": "me')

    taken = await snapshot(path)

    assert taken.size == 0
    assert [chunk async for chunk in read_chunks(taken)] == []


async def test_chunks_stop_at_the_snapshot_while_the_writer_keeps_appending(
    tmp_path: Path,
) -> None:
    store = DirectoryTrajectoryStore(tmp_path)
    with TrajectoryWriter(store.writer_path("ns", "s", UID_OLD)) as writer:
        for turn in range(200):
            writer.write({"kind": "message", "turn": turn, "content": "y" * 1000})
        latest = await store.latest("ns", "s")
        assert latest is not None
        taken = await snapshot(latest)
        chunks = read_chunks(taken, chunk_bytes=4096)
        first = await anext(chunks)
        writer.write({"kind": "result", "turns": 200})
        rest = [chunk async for chunk in chunks]

    assert all(len(chunk) <= 4096 for chunk in [first, *rest])
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(first + b"".join(rest))
    records = list(read_trajectory(copy))
    assert [r["turn"] for r in records] == list(range(200))
