"""The mount plan of a namespaced sandbox, from fixed host facts (no namespaces needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.backends.local.layout import (
    EMPTY_DIRS,
    HostEntry,
    MountOp,
    opt_tools,
    plan_layout,
    private_roots,
)
from sandfleet.errors import SandboxStartError
from sandfleet.sandbox.facade import SandboxPaths

HOST = [
    HostEntry("bin", "symlink", "usr/bin"),
    HostEntry("dev", "dir"),
    HostEntry("etc", "dir"),
    HostEntry("home", "dir"),
    HostEntry("proc", "dir"),
    HostEntry("root", "dir"),
    HostEntry("tmp", "dir"),
    HostEntry("usr", "dir"),
    HostEntry("var", "dir"),
    HostEntry("srv", "dir"),
    HostEntry("opt", "dir"),
    HostEntry("work", "dir"),
    HostEntry("data", "symlink", "/srv/data"),
    HostEntry(".dockerenv", "file"),
]
FS_ROOT = Path("/state/sbx-1/root")


def plan(paths: SandboxPaths | None = None, **kwargs: object) -> list[MountOp]:
    layout = plan_layout(
        paths or SandboxPaths(),
        fs_root=FS_ROOT,
        host_entries=HOST,
        **kwargs,  # type: ignore[arg-type]
    )
    return list(layout.ops)


def test_system_directories_are_bound_read_only_at_their_own_paths() -> None:
    ops = plan()
    assert MountOp("bind", "/usr", "/usr", readonly=True) in ops
    assert MountOp("bind", "/etc", "/etc", readonly=True) in ops


def test_no_other_host_entry_is_bound_an_allowlist_not_a_denylist() -> None:
    ops = plan()
    sources = {op.source for op in ops if op.kind == "bind"}
    assert not sources & {"/work", "/.dockerenv", "/var", "/srv", "/opt", "/home", "/data"}
    assert not [op for op in ops if op.target == "/work"], "a folder of the host's: absent"


def test_data_dirs_are_empty_read_only_tmpfs_and_var_tmp_is_private() -> None:
    ops = plan()
    for path in EMPTY_DIRS:
        assert ops.index(MountOp("tmpfs", path)) < ops.index(MountOp("readonly", path))
    assert MountOp("bind", "/var/tmp", f"{FS_ROOT}/var/tmp") in ops
    assert ops.index(MountOp("tmpfs", "/var")) < ops.index(
        MountOp("bind", "/var/tmp", f"{FS_ROOT}/var/tmp")
    )


def test_only_opt_dirs_on_the_path_count_as_tools() -> None:
    assert opt_tools("/opt/conda/bin:/usr/bin:/opt/tool/x/bin:relative/opt/y:/opt") == [
        "/opt/conda",
        "/opt/tool",
    ]
    ops = plan(read_only=["/opt/conda"])
    conda = MountOp("bind", "/opt/conda", "/opt/conda", readonly=True)
    assert ops.index(MountOp("tmpfs", "/opt")) < ops.index(conda)
    assert ops.index(conda) < ops.index(MountOp("readonly", "/opt"))


def test_an_explicit_read_only_bind_shows_its_path_but_not_a_hidden_dir_inside_it() -> None:
    ops = plan(read_only=["/work/shared"], hidden=["/work/shared/results"])
    bind = MountOp("bind", "/work/shared", "/work/shared", readonly=True)
    mask = MountOp("tmpfs", "/work/shared/results", readonly=True)
    assert ops.index(bind) < ops.index(mask)


def test_a_hidden_dir_inside_a_bind_on_top_of_a_private_dir_is_still_hidden() -> None:
    ops = plan(read_only=["/var/tmp/shared"], hidden=["/var/tmp/shared/state"])
    assert MountOp("tmpfs", "/var/tmp/shared/state", readonly=True) in ops
    assert not [op for op in plan(hidden=["/var/tmp/state"]) if op.target == "/var/tmp/state"]


def test_a_read_only_bind_inside_a_hidden_dir_is_refused() -> None:
    with pytest.raises(SandboxStartError, match="must not see"):
        plan(read_only=["/work/bench/data"], hidden=["/work/bench"])


def test_hidden_dirs_nothing_shows_need_no_mount() -> None:
    ops = plan(hidden=["/work/bench", "/var/tmp/results", "/srv/results"])
    assert not [op for op in ops if op.target in ("/work/bench", "/var/tmp/results")]
    assert not [op for op in ops if op.target == "/srv/results"]


def test_a_masked_project_folder_under_a_system_dir_keeps_the_venv_inside_it() -> None:
    ops = plan(masked=["/usr/local/src/proj"], needed=["/usr/local/src/proj/.venv"])
    mask = MountOp("tmpfs", "/usr/local/src/proj")
    venv = MountOp("bind", "/usr/local/src/proj/.venv", "/usr/local/src/proj/.venv", True)
    assert ops.index(mask) < ops.index(venv) < ops.index(MountOp("readonly", mask.target))


def test_account_files_are_bound_over_the_hosts() -> None:
    ops = plan(files={"/etc/passwd": "/state/sbx-1/etc/passwd"})
    passwd = MountOp("bind", "/etc/passwd", "/state/sbx-1/etc/passwd", readonly=True)
    assert ops.index(MountOp("bind", "/etc", "/etc", readonly=True)) < ops.index(passwd)


def test_top_level_symlinks_are_recreated_not_bound() -> None:
    assert MountOp("symlink", "/bin", "usr/bin") in plan()


def test_testbed_tmp_and_home_are_private_writable_dirs_under_the_sandbox_root() -> None:
    ops = plan()
    for inside in ("/testbed", "/tmp", "/root"):
        assert MountOp("bind", inside, f"{FS_ROOT}{inside}") in ops
    host_binds = {op.target for op in ops if op.kind == "bind" and op.readonly}
    assert not host_binds & {"/tmp", "/root", "/proc", "/dev"}


def test_proc_and_dev_are_fresh_instances() -> None:
    kinds = {op.target: op.kind for op in plan()}
    assert kinds["/proc"] == "proc"
    assert kinds["/dev"] == "dev"


def test_input_and_output_inside_the_working_dir_need_no_mounts_of_their_own() -> None:
    assert private_roots(SandboxPaths()) == ["/testbed"]
    custom = SandboxPaths(
        working_dir="/work",
        input_dir="/data/in",
        output_dir="/work/out",
        answer_file="/work/out/answer.txt",
    )
    assert sorted(private_roots(custom)) == ["/data/in", "/work"]


def test_the_state_dir_is_hidden_unless_a_private_dir_already_covers_it() -> None:
    visible = plan(hidden=["/usr/local/state/sandboxes"])
    assert MountOp("tmpfs", "/usr/local/state/sandboxes", readonly=True) in visible
    under_tmp = plan(hidden=["/tmp/pytest-1/state"])
    assert not [op for op in under_tmp if op.target.startswith("/tmp/")]


def test_an_interpreter_under_a_private_dir_is_bound_back_read_only() -> None:
    ops = plan(
        needed=[
            "/root/.pyenv/versions/3.11.7",
            "/root/.pyenv/versions/3.11.7/lib",
            "/usr/lib/python3",
        ]
    )
    rebound = [op for op in ops if op.readonly and op.target.startswith("/root")]
    assert rebound == [
        MountOp(
            "bind", "/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7", readonly=True
        )
    ]
    assert ops.index(rebound[0]) > ops.index(MountOp("bind", "/root", f"{FS_ROOT}/root"))


def test_an_interpreter_inside_the_hidden_state_dir_is_refused() -> None:
    with pytest.raises(SandboxStartError, match="state_dir"):
        plan(hidden=["/home/alice/state"], needed=["/home/alice/state/venv"])
    with pytest.raises(SandboxStartError, match="state_dir"):
        plan(hidden=["/usr/local/state"], needed=["/usr/local/state/venv"])


def test_a_private_path_that_cannot_get_a_mount_point_is_refused_before_start() -> None:
    paths = SandboxPaths.under("/usr/not-there")
    with pytest.raises(SandboxStartError, match="read-only"):
        plan(paths, host_is_dir=lambda _: False)


def test_a_private_path_under_a_data_dir_or_a_new_folder_needs_nothing_of_the_host() -> None:
    for root in ("/home/alice/not-there", "/work/x"):
        ops = plan(SandboxPaths.under(root), host_is_dir=lambda _: False)
        assert MountOp("bind", root, f"{FS_ROOT}{root}") in ops


def test_relative_or_unnormalized_paths_are_refused() -> None:
    with pytest.raises(SandboxStartError, match="absolute"):
        plan(SandboxPaths.under("testbed"))
    with pytest.raises(SandboxStartError, match="absolute"):
        plan(SandboxPaths.under("/testbed/../etc"))


def test_shared_host_paths_stay_writable_on_top_of_the_read_only_bind() -> None:
    host = [HostEntry("sys", "dir")]
    ops = list(
        plan_layout(
            SandboxPaths(), fs_root=FS_ROOT, host_entries=[*HOST, *host], shared=["/sys/fs/cgroup"]
        ).ops
    )
    shared = MountOp("bind", "/sys/fs/cgroup", "/sys/fs/cgroup")
    assert ops.index(shared) > ops.index(MountOp("bind", "/sys", "/sys", readonly=True))


def test_home_is_empty_and_a_venv_below_it_comes_back_before_it_turns_read_only() -> None:
    ops = plan(needed=["/home/alice/.venv"])
    mask, venv = (
        MountOp("tmpfs", "/home"),
        MountOp("bind", "/home/alice/.venv", "/home/alice/.venv", readonly=True),
    )
    assert not [op for op in ops if op.source == "/home"]
    assert ops.index(mask) < ops.index(venv) < ops.index(MountOp("readonly", "/home"))


def test_run_is_private_so_no_host_socket_is_reachable() -> None:
    ops = plan()
    assert MountOp("bind", "/run", f"{FS_ROOT}/run") in ops
    assert not any(op.source == "/run" for op in ops)
