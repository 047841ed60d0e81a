"""The snapshot store's refusals: archives that escape, sizes over the limit."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from sandfleet.backends.local.snapshot_store import check_size, extract_archive
from sandfleet.errors import SnapshotCorruptError, SnapshotTooLargeError


def test_an_archive_member_outside_the_root_is_refused(tmp_path: Path) -> None:
    folder, root = tmp_path / "snap", tmp_path / "root"
    folder.mkdir()
    root.mkdir()
    with tarfile.open(folder / "files.tar", "w") as tar:
        member = tarfile.TarInfo("../escaped.txt")
        member.size = 3
        tar.addfile(member, io.BytesIO(b"bad"))
    with pytest.raises(SnapshotCorruptError, match="cannot unpack"):
        extract_archive(folder, root)
    assert not (tmp_path / "escaped.txt").exists()


def test_the_size_refusal_names_the_limit_and_the_biggest_paths(tmp_path: Path) -> None:
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "big.bin").write_bytes(b"x" * 300_000)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "small").write_bytes(b"x" * 10)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ignored").write_bytes(b"x" * 900_000)  # /run is not saved
    assert check_size(tmp_path, None) == 300_010
    with pytest.raises(SnapshotTooLargeError) as raised:
        check_size(tmp_path, 200_000)
    message = str(raised.value)
    assert "0.3 MB" in message and "limit of 0.2 MB" in message
    assert "/testbed/big.bin (0.3 MB)" in message and "/run" not in message
