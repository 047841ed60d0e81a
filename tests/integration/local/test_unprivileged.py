"""The namespaced layout also works for a user without root (a laptop): through a user
namespace that maps the caller to the unprivileged SANDBOX_UID. Run as root, these tests
drop to `nobody` first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandfleet.backends.local.isolation import (
    SANDBOX_UID,
    bwrap_options,
    nsinit_spec,
    unshare_command,
)
from sandfleet.backends.local.layout import host_path, plan_layout, scan_host_root
from sandfleet.sandbox.facade import SandboxPaths
from tests.integration.local.conftest import NAMESPACED, mechanism_params

pytestmark = pytest.mark.integration

NOBODY = 65534
PROBE = (
    "id -u; echo private > /testbed/x; touch /usr/sandfleet-probe 2>/dev/null || echo ro; "
    "ls /proc | grep -c '^[0-9]'"
)
# nsinit needs an interpreter the unprivileged user may run; a root-only pyenv is not one.
SYSTEM_PYTHON = next(
    (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None
)


@pytest.fixture
def sandbox_dir() -> Iterator[Path]:
    """A state dir the unprivileged user can reach (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="sandfleet-userns-"))
    base.chmod(0o755)
    try:
        yield base / "sbx-userns"
    finally:
        shutil.rmtree(base)


def as_unprivileged(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    drop = ["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    return ["setpriv", *drop, "--", *argv]


# bubblewrap is refused for root (it would map the sandbox to host uid 0), but this test
# runs it as nobody: only its absence skips it.
_PARAMS = [
    *mechanism_params(tuple(m for m in NAMESPACED if m != "bwrap")),
    pytest.param(
        "bwrap",
        id="bwrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed"),
    ),
]


@pytest.mark.parametrize("mechanism", _PARAMS)
def test_an_unprivileged_user_gets_a_private_testbed_through_a_user_namespace(
    mechanism: str, sandbox_dir: Path
) -> None:
    if SYSTEM_PYTHON is None and mechanism == "unshare":
        pytest.skip("no system python3 the unprivileged user can run for nsinit")
    fs_root = sandbox_dir / "root"
    layout = plan_layout(
        SandboxPaths(), fs_root=fs_root, host_entries=scan_host_root(), hidden=[str(sandbox_dir)]
    )
    for path in layout.private_dirs:
        host_path(fs_root, path).mkdir(parents=True, exist_ok=True)
    (sandbox_dir / "mnt").mkdir()
    agent = ["/bin/sh", "-c", PROBE]
    if mechanism == "bwrap":
        options = bwrap_options(user_namespace=True, ops=layout.ops, cwd="/testbed")
        argv = [shutil.which("bwrap") or "bwrap", *options, "--", *agent]
    else:
        spec = sandbox_dir / "nsinit.json"
        new_root = sandbox_dir / "mnt"
        spec.write_text(
            nsinit_spec(new_root=new_root, ops=layout.ops, cwd="/testbed", agent_argv=agent)
        )
        argv = unshare_command(user_namespace=True, spec_path=spec)
        argv = [SYSTEM_PYTHON if arg == sys.executable else arg for arg in argv]  # type: ignore[misc]
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(sandbox_dir)], check=True)

    run = as_unprivileged(argv)
    result = subprocess.run(run, check=False, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    uid, readonly, process_count = result.stdout.split()
    assert (uid, readonly) == (str(SANDBOX_UID), "ro")
    assert int(process_count) <= 4, "only the sandbox's own processes are visible"
    written = host_path(fs_root, "/testbed/x")
    assert written.read_text() == "private\n"
    assert written.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
