"""Copying output/ back cannot hurt the host: real local sandboxes, and one lying runtime."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.sandbox.copy_back import CopyLimits, copy_tree
from sandfleet.sandbox.facade import Sandbox
from sandfleet_proto.runtime.v1 import file_service_pb2 as file_pb
from sandfleet_proto.runtime.v1 import file_service_pb2_grpc as file_grpc
from sandfleet_runtime.servicers import FileServicer
from sandfleet_runtime.stats import ActivityClock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@contextlib.asynccontextmanager
async def local_sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    async with Sandbox.local(LocalSandboxConfig(state_dir=tmp_path / "state")) as sandbox:
        yield sandbox


async def sh(sandbox: Sandbox, command: str) -> None:
    result = await sandbox.bash(command)
    assert result.exit_code == 0, result


def skipped_reasons(report_skipped: list[object]) -> dict[str, str]:
    return {
        os.path.basename(entry.path): entry.reason  # type: ignore[attr-defined]
        for entry in report_skipped
    }


async def test_links_fifos_and_devices_are_skipped_and_every_regular_file_still_arrives(
    tmp_path: Path,
) -> None:
    async with local_sandbox(tmp_path) as sandbox:
        out = sandbox.paths.output_dir
        await sh(
            sandbox,
            f"cd {out} && mkdir -p sub && echo one > a.txt && echo two > sub/b.txt"
            " && ln -s /etc/passwd passwd-link && ln -s /dev/zero zero && mkfifo pipe"
            " && printf x > suid && chmod 6755 suid && mkdir sticky && chmod 1777 sticky",
        )
        local = tmp_path / "copied"
        report = await sandbox.copy_tree(out, local)

    assert sorted(report.files) == ["a.txt", "sub/b.txt", "suid"]
    assert (local / "a.txt").read_text() == "one\n"
    assert (local / "sub" / "b.txt").read_text() == "two\n"
    # setuid and setgid are gone; the permission bits stay.
    assert stat.S_IMODE((local / "suid").stat().st_mode) == 0o755
    reasons = skipped_reasons(report.skipped)
    assert set(reasons) == {"passwd-link", "zero", "pipe"}
    assert "symbolic link" in reasons["passwd-link"]
    assert "symbolic link" in reasons["zero"]
    assert "FIFO" in reasons["pipe"]
    assert not report.truncated and report.skipped_total == 3
    assert not any(p.is_symlink() for p in local.rglob("*"))
    assert sorted(p.name for p in local.iterdir()) == ["a.txt", "sub", "suid"]
    record = report.to_record()
    assert record["files"] == 3 and record["bytes"] == 9 and len(record["skipped"]) == 3


async def test_a_sparse_giant_is_skipped_by_the_byte_cap_and_too_many_files_are_reported(
    tmp_path: Path,
) -> None:
    async with local_sandbox(tmp_path) as sandbox:
        out = sandbox.paths.output_dir
        await sh(
            sandbox,
            f"cd {out} && truncate -s 3G big.sparse"
            " && for i in 1 2 3 4 5; do echo $i > f$i.txt; done",
        )
        local = tmp_path / "copied"
        report = await sandbox.copy_tree(out, local, CopyLimits(max_bytes=1024, max_files=3))

    assert report.files == ["f1.txt", "f2.txt", "f3.txt"]
    assert report.truncated
    reasons = skipped_reasons(report.skipped)
    assert "over the limit of 1024 bytes" in reasons["big.sparse"]
    assert "over the limit of 3 files" in reasons["f4.txt"]
    assert "over the limit of 3 files" in reasons["f5.txt"]
    assert not (local / "big.sparse").exists()
    assert sum(p.stat().st_size for p in local.iterdir()) == report.bytes == 6


async def test_an_output_directory_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    async with local_sandbox(tmp_path) as sandbox:
        out = sandbox.paths.output_dir
        await sh(
            sandbox,
            f"mkdir -p /tmp/elsewhere && echo private > /tmp/elsewhere/secret"
            f" && rm -rf {out} && ln -s /tmp/elsewhere {out}",
        )
        local = tmp_path / "copied"
        report = await sandbox.copy_tree(out, local)

    assert report.files == [] and report.truncated
    assert "is a symbolic link or not a directory" in report.skipped[0].reason
    assert list(local.iterdir()) == []


class _LyingFileService(FileServicer):
    """The real runtime's file service with a ListFiles that lies (a compromised runtime).

    ListFiles names paths outside the output directory and understates a file's size;
    DownloadFile is the real one, so whatever the client asks for is really served.
    """

    def __init__(self, output_dir: Path, outside: Path) -> None:
        super().__init__(ActivityClock())
        self._output_dir = output_dir
        self._outside = outside

    async def ListFiles(
        self, request: file_pb.ListFilesRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> file_pb.ListFilesResponse:
        out = str(self._output_dir)
        lies = [
            (f"{out}/../{self._outside.name}", 5),
            (str(self._outside), 5),
            (f"{out}/./ok.txt", 3),
            (f"{out}//ok.txt", 3),
            (f"{out}/bad\x00name", 3),
            (f"{out}/big.bin", 1),  # really 64 KiB: only streaming can tell
            (f"{out}/ok.txt", 3),
            (f"{out}/ok.txt", 3),  # listed twice: the second copy must not overwrite
        ]
        return file_pb.ListFilesResponse(
            entries=[file_pb.FileEntry(path=p, size=s, mode=0o4755) for p, s in lies]
        )


async def test_a_lying_runtime_cannot_write_outside_the_folder_or_past_the_byte_cap(
    tmp_path: Path,
) -> None:
    """A real gRPC runtime file service whose ListFiles is replaced by lies (the one place a
    stand-in is needed: an honest runtime never lists such paths)."""
    output = tmp_path / "sandbox" / "output"
    output.mkdir(parents=True)
    (output / "ok.txt").write_bytes(b"ok\n")
    (output / "big.bin").write_bytes(b"z" * 65536)
    secret = tmp_path / "sandbox" / "secret.txt"
    secret.write_text("host!")
    server = grpc.aio.server()
    file_grpc.add_FileServiceServicer_to_server(_LyingFileService(output, secret), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = RuntimeClient(f"127.0.0.1:{port}", "token")
    local_parent = tmp_path / "results"
    local_parent.mkdir()
    try:
        report = await copy_tree(
            client, str(output), local_parent / "output", CopyLimits(max_bytes=1000)
        )
    finally:
        await client.close()
        await server.stop(None)

    assert report.files == ["ok.txt"]
    assert sorted(p.name for p in local_parent.iterdir()) == ["output"]
    assert sorted(p.name for p in (local_parent / "output").iterdir()) == ["ok.txt"]
    assert (local_parent / "output" / "ok.txt").read_bytes() == b"ok\n"
    assert stat.S_IMODE((local_parent / "output" / "ok.txt").stat().st_mode) == 0o755
    reasons = [entry.reason for entry in report.skipped]
    assert reasons[:5] == [
        "the path is not normalised (empty, '.' or '..' parts)",
        "the path is outside the output directory",
        "the path is not normalised (empty, '.' or '..' parts)",
        "the path is not normalised (empty, '.' or '..' parts)",
        "the path contains a NUL byte",
    ]
    assert "grew over the limit of 1000 bytes" in reasons[5]
    assert "cannot write it here" in reasons[6]  # the duplicate: O_EXCL refused it
    assert report.truncated and report.skipped_total == 7
