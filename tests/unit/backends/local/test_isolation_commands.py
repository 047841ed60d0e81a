"""Command lines that start a sandbox: the same mount plan through bwrap or unshare+nsinit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sandfleet.backends.local.isolation import (
    NSINIT,
    SANDBOX_UID,
    bwrap_options,
    nsinit_spec,
    unshare_command,
)
from sandfleet.backends.local.layout import MountOp

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
    assert "--unshare-net" in options  # the agent serves on a Unix socket; no host network


def test_a_read_only_op_after_the_binds_becomes_a_remount() -> None:
    options = bwrap_options(user_namespace=False, ops=(MountOp("readonly", "/home"),), cwd="/")
    assert options[-6:-4] == ["--remount-ro", "/home"]


def test_without_root_bwrap_maps_the_caller_to_an_unprivileged_uid_without_capabilities() -> None:
    options = bwrap_options(user_namespace=True, ops=(), cwd="/testbed")
    assert "--unshare-user" in options
    assert options[options.index("--uid") + 1] == str(SANDBOX_UID)
    assert options[options.index("--gid") + 1] == str(SANDBOX_UID)
    assert options[options.index("--cap-drop") + 1] == "ALL"
    assert "--disable-userns" in options
    # unshare maps us to root only for nsinit's setup; nsinit then drops to SANDBOX_UID.
    command = unshare_command(user_namespace=True, spec_path=Path("/s/nsinit.json"))
    assert {"--user", "--map-root-user", "--net"} <= set(command)


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
            host_uid=2**31 - 5,
        )
    )
    assert (spec["uid"], spec["host_uid"]) == (SANDBOX_UID, 2**31 - 5)
    assert spec["ops"][0] == {"kind": "bind", "target": "/usr", "source": "/usr", "readonly": True}
    assert spec["argv"] == ["python", "-m", "sandfleet_runtime"]
    assert spec["cgroups"] == ["/sys/fs/cgroup/pids/sandfleet-sbx"]
