"""`sandfleet sandboxes`: list, suspend from outside, rm, against real local sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet import Sandbox, SandboxLostError
from sandfleet.backends.local.registry import Registry
from sandfleet.cli.main import main

from .conftest import config_for, mechanism_params


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("mechanism", mechanism_params(("bwrap", "unshare")))
async def test_list_suspend_and_rm(
    mechanism: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path)
    sandbox = await Sandbox.local(config_for(mechanism, tmp_path))
    try:
        await sandbox.bash("echo kept > notes.txt")
        (record,) = Registry(tmp_path).records()
        sandbox_id_text = record.sandbox_id
        code, out = _cli(capsys, "sandboxes", "--state-dir", state)
        assert code == 0 and sandbox_id_text in out and "running" in out, out
        code, out = _cli(capsys, "sandboxes", "rm", sandbox_id_text, "--state-dir", state)
        assert code == 2 and "is running" in out and "--force" in out, out
        code, out = _cli(capsys, "sandboxes", "suspend", sandbox_id_text, "--state-dir", state)
        assert code == 0 and "suspended" in out and "Sandbox.resume" in out, out
        with pytest.raises(SandboxLostError):
            await sandbox.bash("true")
    finally:
        await sandbox.close()
    code, out = _cli(capsys, "sandboxes", "--state-dir", state, "--json")
    assert code == 0 and '"state": "suspended"' in out, out

    async with Sandbox.resume(sandbox_id_text, state_dir=tmp_path) as resumed:
        assert (await resumed.bash("cat notes.txt")).stdout.strip() == "kept"
        suspended = await resumed.suspend()
    code, out = _cli(capsys, "sandboxes", "rm", suspended.id, "--state-dir", state)
    assert code == 0 and "removed" in out, out
    assert not suspended.path.exists()
    code, out = _cli(capsys, "sandboxes", "--state-dir", state)
    assert code == 0 and "no local sandboxes" in out, out
    code, out = _cli(capsys, "sandboxes", "suspend", "sbx-none", "--state-dir", state)
    assert code == 2 and "no running local sandbox sbx-none" in out, out
