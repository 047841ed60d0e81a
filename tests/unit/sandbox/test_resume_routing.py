"""Sandbox.resume picks local or cluster from what it is given: a record's namespace, or any
cluster argument; never both kinds at once. (The cluster resume itself runs in
tests/cluster/gateway/test_sdk_suspend.py, the local one in tests/integration/local.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet import Sandbox
from sandfleet.errors import SnapshotCorruptError
from sandfleet.sandbox.suspension import SuspendedSandbox


def record(namespace: str | None) -> SuspendedSandbox:
    return SuspendedSandbox(
        id="sbx-0a9b8c7d6e5f", size_bytes=1, sha256="0" * 64, suspended_at=0.0,
        namespace=namespace,
    )  # fmt: skip


def test_local_arguments_with_a_cluster_session_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state_dir and config are for local sandboxes"):
        Sandbox.resume(record("team-a"), state_dir=tmp_path)
    with pytest.raises(ValueError, match="state_dir and config are for local sandboxes"):
        Sandbox.resume("sbx-0a9b8c7d6e5f", namespace="team-a", state_dir=tmp_path)


@pytest.mark.parametrize("given", ["sbx-0a9b8c7d6e5f", record(None)])
async def test_an_id_or_a_local_record_resumes_locally(
    tmp_path: Path, given: str | SuspendedSandbox
) -> None:
    with pytest.raises(SnapshotCorruptError, match="no suspended sandbox 'sbx-0a9b8c7d6e5f'"):
        await Sandbox.resume(given, state_dir=tmp_path)
