"""Command lines that start a sandbox: the same mount plan through bwrap or unshare+nsinit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sandfleet.local.isolation import NSINIT, bwrap_options, nsinit_spec, unshare_command
from sandfleet.local.layout import MountOp

OPS = (
    MountOp("bind", "/usr", "/usr", readonly=True),
    MountOp("symlink", "/bin", "usr/bin"),
    MountOp("dev", "/dev"),
    MountOp("proc", "/proc"),
    MountOp("bind", "/testbed", "/state/sbx/root/testbed"),
    MountOp("tmpfs", "/home/alice/.cache/sandfleet", readonly=True),
)


def test_bwrap_gets_each_mount_op_as_its_flag_in_order() -> None:
    options = bwrap_options(user_namespace=False, ops=OPS, cwd="/testbed")
    joined = " ".join(options)
    assert (
        "--ro-bind /usr /usr --symlink usr/bin /bin --dev /dev --proc /proc "
        "--bind /state/sbx/root/testbed /testbed" in joined
    )
    assert (
        "--tmpfs /home/alice/.cache/sandfleet --remount-ro /home/alice/.cache/sandfleet" in joined
    )
    assert options[-4:] == ["--remount-ro", "/", "--chdir", "/testbed"]
    assert {"--unshare-pid", "--unshare-ipc", "--die-with-parent"} <= set(options)
    assert "--unshare-net" not in options  # the agent listens on the host's loopback


def test_without_root_both_tools_add_a_user_namespace_that_maps_the_caller_to_root() -> None:
    options = bwrap_options(user_namespace=True, ops=(), cwd="/testbed")
    assert "--unshare-user" in options
    assert options[options.index("--uid") + 1] == "0"
    command = unshare_command(user_namespace=True, spec_path=Path("/s/nsinit.json"))
    assert {"--user", "--map-root-user"} <= set(command)


def test_bwrap_can_hold_the_command_until_the_cgroups_are_joined() -> None:
    options = bwrap_options(user_namespace=False, ops=(), cwd="/testbed", block_fd=9)
    assert options[options.index("--block-fd") + 1] == "9"


def test_unshare_dies_with_us_and_runs_nsinit_with_the_spec_from_a_file() -> None:
    command = unshare_command(user_namespace=False, spec_path=Path("/s/nsinit.json"))
    if shutil.which("setpriv"):  # util-linux >= 2.33; without it the sweep covers a crash
        assert command[1:4] == ["--pdeathsig", "KILL", "--"]
    assert {"--mount", "--pid", "--ipc", "--fork", "--kill-child=SIGKILL"} <= set(command)
    assert "--user" not in command
    assert command[-2:] == [str(NSINIT), "/s/nsinit.json"]


def test_the_nsinit_spec_carries_the_plan_the_agent_and_the_cgroups() -> None:
    spec = json.loads(
        nsinit_spec(
            new_root=Path("/state/sbx/mnt"),
            ops=OPS[:2],
            cwd="/testbed",
            agent_argv=["python", "-m", "sandfleet_runtime"],
            cgroups=[Path("/sys/fs/cgroup/pids/sandfleet-sbx")],
        )
    )
    assert spec["ops"][0] == {"kind": "bind", "target": "/usr", "source": "/usr", "readonly": True}
    assert spec["argv"] == ["python", "-m", "sandfleet_runtime"]
    assert spec["cgroups"] == ["/sys/fs/cgroup/pids/sandfleet-sbx"]
