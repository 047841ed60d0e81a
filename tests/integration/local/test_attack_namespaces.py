"""Issue 26, finding 3, as the attack: from inside a real local sandbox, raw syscalls that
would create new namespaces (clone with CLONE_NEW* flags, clone3, unshare) or an io_uring
are refused, run as root and as an unprivileged user, with unshare and bubblewrap; fork,
threads and shell pipelines still work. Without libseccomp no sandbox starts at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandfleet.backends.local import LocalSandboxConfig, launch_local_runtime, nsinit
from sandfleet.backends.local.isolation import nsinit_spec, unshare_command
from sandfleet.backends.local.layout import host_path, plan_layout, scan_host_root
from sandfleet.cli.doctor_checks import Status, local_isolation
from sandfleet.errors import SandboxStartError
from sandfleet.sandbox.facade import SandboxPaths
from sandfleet.settings import Settings
from tests.integration.local.test_isolation_attacks import _unprivileged

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
REPO = HERE.parents[2]
DOORS = HERE / "kernel_doors.py"
RUN = HERE / "run_in_sandbox.py"
REFUSED = {
    "clone_newuser_newnet": "refused:EPERM",
    "clone_newns": "refused:EPERM",
    "clone_newpid": "refused:EPERM",
    # clone3's flags live in memory seccomp cannot read: ENOSYS sends glibc back to clone.
    "clone3_newuser": "refused:ENOSYS",
    "clone3_plain": "refused:ENOSYS",
    "unshare_newuser": "refused:EPERM",
    "io_uring_setup": "refused:EPERM",
}


@pytest.mark.parametrize("tool", ["unshare", "bwrap"])
@pytest.mark.parametrize("as_user", [False, True], ids=["as-root", "as-user"])
def test_no_door_to_a_new_namespace_or_io_uring_opens_and_ordinary_work_goes_on(
    as_user: bool, tool: str, work_dir: Path
) -> None:
    if not as_user and os.geteuid() != 0:
        pytest.skip("the as-root variant needs root (CI runs as root)")
    argv = [sys.executable, str(RUN), str(work_dir / "state"), tool, str(DOORS)]
    if as_user:
        argv = _unprivileged(argv, work_dir)
    result = subprocess.run(
        argv,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=work_dir,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if "unavailable" in report:
        pytest.skip(f"{tool} cannot isolate here: {report['unavailable']}")

    assert {door: report[door] for door in REFUSED} == REFUSED
    assert report["plain_clone"].startswith("opened:"), "a clone without CLONE_NEW* is a fork"
    assert report["works"] == "ok", "fork, threads, subprocesses and pipelines still work"


async def test_without_libseccomp_no_sandbox_starts_and_doctor_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nsinit, "LIBSECCOMP", "libseccomp-not-installed.so.2")
    config = LocalSandboxConfig(state_dir=tmp_path / "state", isolation="namespaces")

    with pytest.raises(SandboxStartError, match="libseccomp2"):
        await launch_local_runtime(config)
    check = await local_isolation(Settings(), {})
    assert check.status == Status.FAIL and "libseccomp2" in check.detail


def test_nsinit_itself_refuses_to_run_a_sandbox_without_its_filter(tmp_path: Path) -> None:
    """Belt and braces: even started by hand, past the launcher's check, nsinit stops
    before the agent runs when libseccomp cannot be loaded (masked here in a private mount
    namespace of the test's own)."""
    if os.geteuid() != 0:
        pytest.skip("masking the system's libseccomp needs root")
    library = next(
        (p for p in Path("/").glob("usr/lib*/**/libseccomp.so.2*") if not p.is_symlink()), None
    )
    if library is None:
        pytest.skip("libseccomp is not installed here")
    sandbox_dir = tmp_path / "sbx"
    fs_root = sandbox_dir / "root"
    layout = plan_layout(
        SandboxPaths(), fs_root=fs_root, host_entries=scan_host_root(), hidden=[str(tmp_path)]
    )
    for path in layout.private_dirs:
        host_path(fs_root, path).mkdir(parents=True, exist_ok=True)
    (sandbox_dir / "mnt").mkdir()
    spec = sandbox_dir / "nsinit.json"
    agent = ["/bin/sh", "-c", "echo agent-ran"]
    spec.write_text(
        nsinit_spec(new_root=sandbox_dir / "mnt", ops=layout.ops, cwd="/testbed", agent_argv=agent)
    )
    command = unshare_command(user_namespace=False, spec_path=spec)
    mask = f'mount --bind /dev/null {library} && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mask, "sh", *command]

    result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)

    assert "agent-ran" not in result.stdout
    assert result.returncode == nsinit.EXIT_SETUP_FAILED, result.stderr
    assert "libseccomp2" in result.stderr
