"""PID 1 of a namespaced sandbox: builds its root, then becomes a tiny shell that runs the agent.

Run as a script (`python -I -S nsinit.py SPEC_FILE`) by `unshare --mount --pid --ipc --fork`,
so it imports only the standard library. SPEC_FILE holds JSON: {"new_root": host dir to mount
the tmpfs root on, "ops": [MountOp as dict, ...], "cwd": ..., "argv": [...], "cgroups": [...],
"host_uid": host uid to become first (only when started as root), "uid": uid inside}.
Why an init of our own: the agent would otherwise be PID 1, which must reap every orphan
(double-forked daemons, shells' leftovers) and ignores signals it has no handler for. When
PID 1 exits, the kernel kills everything left in the PID namespace: that is the sandbox's
reclaim guarantee. bubblewrap brings its own init, so this file serves `unshare`.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import socket
import struct
import sys
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the unification)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LAST_CAP_FILE = "/proc/sys/kernel/cap_last_cap"
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000
SCMP_CMP_MASKED_EQ = 7
CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": CLONE_NEWUSER,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    # Only unshare and clone3 take it (in clone's flags this bit is part of the exit signal,
    # which no valid signal sets): denied anyway, so no future kernel reading makes it a door.
    "CLONE_NEWTIME": 0x00000080,
}
CLONE_SYSCALLS = ("clone", "clone2")
"""Allowed (fork, threads, posix_spawn use them) unless their flags ask for a namespace."""
ENOSYS_SYSCALLS = ("clone3",)
"""Its flags sit in a struct that seccomp cannot read: "not implemented" makes glibc fall back
to clone, whose flags the filter checks (what Docker and containerd do)."""
DENIED_SYSCALLS = (
    # Namespaces and mounts: the sandbox's are built; new ones only widen the kernel surface.
    *("unshare", "setns", "mount", "umount2", "pivot_root", "mount_setattr", "move_mount"),
    *("open_tree", "fsopen", "fsmount", "fsconfig", "fspick"),
    # Kernel keyrings, BPF, perf, userfaultfd, modules, kexec: classic privilege-escalation
    # surfaces that no shell task needs (Docker's default profile blocks them too).
    *("add_key", "keyctl", "request_key", "bpf", "perf_event_open", "userfaultfd"),
    *("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
    *("open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "acct"),
    *("swapon", "swapoff", "reboot", "syslog", "iopl", "ioperm", "vhangup"),
    *("settimeofday", "clock_settime", "clock_adjtime", "adjtimex"),
    # io_uring runs operations in kernel workers that seccomp never sees, and has been a
    # steady source of kernel bugs (Docker's default profile denies it since 2023).
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
)
LIBSECCOMP = "libseccomp.so.2"
NO_LIBSECCOMP = (
    f"no {LIBSECCOMP}: local sandboxes do not start without their seccomp filter "
    "(install libseccomp: Debian/Ubuntu package libseccomp2, Fedora/RHEL libseccomp)"
)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
EXIT_SETUP_FAILED = 125
SHELL = "/bin/sh"
REAPER_SCRIPT = (
    '"$@" & a=$!; trap "kill -TERM \\$a" TERM INT HUP QUIT; '
    "while :; do wait $a; s=$?; kill -0 $a 2>/dev/null || exit $s; done"
)

_libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc.mount(
        _bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data or None)
    )
    _check(result, f"mount {source or fstype} on {target}")


def make_readonly(target: str, *, recursive: bool) -> None:
    """Read-only including submounts (mount_setattr, Linux 5.12+), else the top mount only.

    Keeping the other flags matters: in a user namespace, remounting a bind without the
    original nosuid/nodev is refused (those flags are locked), and mount_setattr leaves them.
    """
    attr = MountAttr(attr_set=MOUNT_ATTR_RDONLY)
    flags = AT_RECURSIVE if recursive else 0
    result = _libc.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, _bytes(target), flags, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if result == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:  # an old kernel: fall back to a classic remount
        _check(result, f"make {target} read-only")
    keep = os.statvfs(target).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def _make_target(path: str, *, directory: bool) -> None:
    if directory:
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.lexists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def build_dev(dev: str) -> None:
    """A minimal /dev: the usual character devices, a private pts instance and /dev/shm."""
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for name in DEVICES:
        _make_target(f"{dev}/{name}", directory=False)
        mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for name, link in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ):
        os.symlink(link, f"{dev}/{name}")
    os.mkdir(f"{dev}/pts")
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666")
    os.mkdir(f"{dev}/shm")
    mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def apply(op: dict[str, Any], new_root: str) -> None:
    kind, target, source = op["kind"], new_root + op["target"], op.get("source", "")
    if kind == "symlink":
        os.symlink(source, target)
    elif kind == "bind":
        _make_target(target, directory=os.path.isdir(source))
        mount(source, target, None, MS_BIND | MS_REC)
        if op.get("readonly"):
            make_readonly(target, recursive=True)
    elif kind == "tmpfs":
        _make_target(target, directory=True)
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        if op.get("readonly"):
            make_readonly(target, recursive=False)
    elif kind == "proc":
        _make_target(target, directory=True)
        mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    elif kind == "readonly":
        make_readonly(target, recursive=False)
    elif kind == "dev":
        _make_target(target, directory=True)
        build_dev(target)
    else:
        raise ValueError(f"unknown mount op {kind!r}")


def switch_root(new_root: str) -> None:
    """Make new_root the root and detach the host's, so no path leads back to it."""
    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None:
        _check(_libc.syscall(number, b".", b"."), "pivot_root")
        _check(_libc.umount2(b".", MNT_DETACH), "detach the host root")
    else:  # no known pivot_root number: move the mount over / and chroot (switch_root style)
        mount(new_root, "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")
    make_readonly("/", recursive=False)


def join_cgroups(directories: list[str]) -> None:
    """Enter the sandbox's parent cgroups before anything else runs ("0" means: this process)."""
    for directory in directories:
        fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def drop_privileges(uid: int, host_uid: int | None) -> None:
    """Become an unprivileged `uid` in a user namespace of our own, with no capabilities.

    As root (no user namespace yet) we first become `host_uid`, an id no host file belongs
    to: host files (/etc/shadow) stay closed by plain permissions. The nested user namespace
    maps `uid` to whatever we are now; the mounts built above belong to the parent one, so
    they are locked (a remount to read-write is refused, even after another unshare).
    The bounding set is emptied and no_new_privs set: no setuid binary or file capability
    gives anything back; exec as a non-zero uid clears the rest.
    """
    if host_uid is not None:
        os.setgroups([])
        os.setresgid(host_uid, host_uid, host_uid)
        os.setresuid(host_uid, host_uid, host_uid)
        # A uid change makes us non-dumpable: /proc/self/*_map would stay root's to write.
        _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "set dumpable")
    outside_uid, outside_gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER), "create a user namespace")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {outside_uid} 1")
    _write("/proc/self/gid_map", f"{uid} {outside_gid} 1")
    with open(LAST_CAP_FILE) as handle:
        last_cap = int(handle.read())
    for cap in range(last_cap + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


class ArgCmp(ctypes.Structure):
    """libseccomp's struct scmp_arg_cmp: one comparison of a syscall argument."""

    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


def clone_flags_argument() -> int:
    """Which argument of clone holds its flags (s390 swaps the first two)."""
    return 1 if platform.machine().startswith("s390") else 0


def libseccomp_loadable() -> bool:
    try:
        ctypes.CDLL(LIBSECCOMP)
    except OSError:
        return False
    return True


def seccomp_filter() -> tuple[Any, int] | None:
    """(libseccomp, filter context), or None without libseccomp (Debian's libseccomp2, a
    dependency of systemd and of bubblewrap's distros). The filter answers EPERM to
    DENIED_SYSCALLS and to clone with any CLONE_NEW* flag, ENOSYS to ENOSYS_SYSCALLS; the
    other architectures of the machine (x32, i386 on x86_64) are killed (libseccomp's
    default for a foreign architecture), so no 32-bit door leads around it."""
    try:
        lib = ctypes.CDLL(LIBSECCOMP, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not context:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        for name in DENIED_SYSCALLS:
            _add_rule(lib, context, name, errno.EPERM)
        for name in ENOSYS_SYSCALLS:
            _add_rule(lib, context, name, errno.ENOSYS)
        # One rule per flag: rules are alternatives, so any one flag set means EPERM.
        flags_arg = clone_flags_argument()
        for name in CLONE_SYSCALLS:
            for flag in CLONE_NEW_FLAGS.values():
                _add_rule(
                    lib,
                    context,
                    name,
                    errno.EPERM,
                    ArgCmp(flags_arg, SCMP_CMP_MASKED_EQ, flag, flag),
                )
    except BaseException:
        lib.seccomp_release(context)
        raise
    return lib, context


def _add_rule(lib: Any, context: int, name: str, error: int, *conditions: ArgCmp) -> None:
    """Answer `name` with `error` (when every condition holds); skipped where the
    architecture has no such syscall (clone2 exists only on ia64)."""
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:
        return
    array = (ArgCmp * len(conditions))(*conditions) if conditions else None
    result = lib.seccomp_rule_add_array(
        context, SCMP_ACT_ERRNO | error, number, len(conditions), array
    )
    if result < 0:
        raise OSError(-result, f"seccomp rule for {name}: {os.strerror(-result)}")


def load_seccomp() -> bool:
    """Apply the filter to us and everything we start (after no_new_privs); False without
    libseccomp."""
    built = seccomp_filter()
    if built is None:
        return False
    lib, context = built
    try:
        result = lib.seccomp_load(context)
    finally:
        lib.seccomp_release(context)
    if result < 0:
        raise OSError(-result, f"load the seccomp filter: {os.strerror(-result)}")
    return True


def export_seccomp(fd: int) -> bool:
    """Write the filter as a BPF program to fd (bubblewrap's --seccomp); False without
    libseccomp."""
    built = seccomp_filter()
    if built is None:
        return False
    lib, context = built
    try:
        result = lib.seccomp_export_bpf(context, fd)
    finally:
        lib.seccomp_release(context)
    if result < 0:
        raise OSError(-result, f"export the seccomp filter: {os.strerror(-result)}")
    return True


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def loopback_up() -> None:
    """The new network namespace's `lo` starts down: bring it up (what bubblewrap does), so
    programs in the sandbox can talk to each other on 127.0.0.1 and nowhere else."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def build_root(spec: dict[str, Any]) -> None:
    new_root = spec["new_root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount may reach the host
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for op in spec["ops"]:
        apply(op, new_root)
    switch_root(new_root)


def exec_reaper(argv: list[str]) -> None:
    """Become a /bin/sh that runs the agent as its one job and reaps everything else.

    A shell, not this Python, stays PID 1: it costs ~1 MB instead of ~7 MB (PSS) per sandbox.
    sh reaps every child it gets, known or reparented, while it waits; the trap forwards
    termination to the agent; when the agent exits, the shell exits with its status.
    """
    os.execv(SHELL, ["sandfleet-init", "-c", REAPER_SCRIPT, "sandfleet-init", *argv])


def main() -> None:
    os.umask(0o022)  # mount points we create must be traversable by the sandbox's uid
    with open(sys.argv[1], "rb") as handle:
        spec = json.load(handle)
    try:
        join_cgroups(spec.get("cgroups", []))
        build_root(spec)
        loopback_up()
        drop_privileges(int(spec["uid"]), spec.get("host_uid"))
        if not load_seccomp():
            print(f"sandfleet-init: {NO_LIBSECCOMP}", file=sys.stderr, flush=True)
            os._exit(EXIT_SETUP_FAILED)
        os.chdir(spec["cwd"])
    except OSError as exc:
        print(f"sandfleet-init: cannot build the sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(EXIT_SETUP_FAILED)
    try:
        exec_reaper(spec["argv"])
    except OSError as exc:
        print(f"sandfleet-init: cannot start {SHELL}: {exc}", file=sys.stderr, flush=True)
    os._exit(EXIT_SETUP_FAILED)


if __name__ == "__main__":
    main()
