"""Issue 26, finding 4, at the SDK level, as the attack: code in a real local sandbox (run as
root and as an unprivileged user, with unshare and bubblewrap) reads world-readable host
data in /var/tmp and in a folder of the host's own (/work-like) and gets nothing; a folder
given as LocalSandboxConfig.read_only_binds is readable but not writable, and the state dir
inside it stays hidden. (The CLI's variants, results and benchmarks, are in
tests/integration/cli/test_attack_host_data.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.local.test_isolation_attacks import THROWAWAY_UID, _unprivileged

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
REPO = HERE.parents[2]
RUN = HERE / "run_in_sandbox.py"
PROBE = """\
import json, os, sys
paths = json.loads(sys.argv[1]) if len(sys.argv) > 1 else PATHS
report = {}
for path in paths:
    try:
        with open(path) as handle:
            report[path] = "read:" + handle.read().strip()
    except OSError as error:
        report[path] = "error:" + type(error).__name__
try:
    open(WRITE, "w").close()
    report["write"] = "wrote"
except OSError as error:
    report["write"] = "error:" + type(error).__name__
print(json.dumps(report))
"""


@pytest.fixture
def folders() -> Iterator[dict[str, Path]]:
    """A world-readable data folder in /var/tmp, one to bind, and the run's state dir,
    which lies inside the bound folder (it must stay hidden there)."""
    made = {
        "data": Path(tempfile.mkdtemp(prefix="sandfleet-data-", dir="/var/tmp")),
        "bound": Path(tempfile.mkdtemp(prefix="sandfleet-bound-", dir="/var/tmp")),
    }
    for name, folder in made.items():
        folder.chmod(0o755)
        (folder / "file.txt").write_text(f"{name}-contents\n")
        (folder / "file.txt").chmod(0o644)
    state = made["bound"] / "state"
    state.mkdir()
    (state / "leak.txt").write_text("state-contents\n")
    (state / "leak.txt").chmod(0o644)
    if os.geteuid() == 0:
        shutil.chown(made["bound"], THROWAWAY_UID, THROWAWAY_UID)
        shutil.chown(state, THROWAWAY_UID, THROWAWAY_UID)
    made["state"] = state
    try:
        yield made
    finally:
        for folder in made.values():
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("tool", ["unshare", "bwrap"])
@pytest.mark.parametrize("as_user", [False, True], ids=["as-root", "as-user"])
def test_host_data_is_invisible_and_an_explicit_bind_is_read_only(
    as_user: bool, tool: str, folders: dict[str, Path]
) -> None:
    if not as_user and os.geteuid() != 0:
        pytest.skip("the as-root variant needs root (CI runs as root)")
    data, bound, state = (
        folders["data"] / "file.txt",
        folders["bound"] / "file.txt",
        folders["state"],
    )
    paths = [str(data), str(bound), str(state / "leak.txt"), "/etc/hostname"]
    script = folders["state"].parent / "probe.py"
    script.write_text(
        PROBE.replace("PATHS", json.dumps(paths)).replace("WRITE", repr(str(bound) + ".new"))
    )
    argv = [sys.executable, str(RUN), str(state), tool, str(script), str(folders["bound"])]
    if as_user:
        argv = _unprivileged(argv, folders["bound"])
    result = subprocess.run(
        argv,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=folders["data"],  # the folder the user runs from: data too
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if "unavailable" in report:
        pytest.skip(f"{tool} cannot isolate here: {report['unavailable']}")

    assert report[str(data)] == "error:FileNotFoundError", "host data in /var/tmp"
    assert report[str(bound)] == "read:bound-contents", "the explicit read-only bind"
    assert report["write"].startswith("error:"), "read-only"
    assert report[str(state / "leak.txt")] == "error:FileNotFoundError", "state dir stays hidden"
    assert report["/etc/hostname"].startswith("read:"), "system files stay visible"
