"""Run INSIDE a sandbox (standard library only): every door to a new namespace or to io_uring
that a model's code could try with raw syscalls, then what ordinary code needs (fork,
threads, subprocesses). Prints one JSON object: door -> "refused:<errno name>" or
"opened: <what the new process saw>"; works -> "ok" or the failure."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import signal
import subprocess
import threading

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
SYSCALLS = {  # clone's own number differs; clone3, io_uring_setup are unified numbers
    "x86_64": {"clone": 56, "unshare": 272},
    "aarch64": {"clone": 220, "unshare": 97},
}[platform.machine()]
SYS_CLONE3 = 435
SYS_IO_URING_SETUP = 425

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class CloneArgs(ctypes.Structure):
    """struct clone_args, version 0 (64 bytes)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
        )
    ]


def _child_report(write_fd: int) -> None:
    """In the new process: what it got (uid map, capabilities), then leave at once."""
    try:
        with open("/proc/self/uid_map") as handle:
            uid_map = " ".join(handle.read().split())
        with open("/proc/self/status") as handle:
            caps = [line.split()[1] for line in handle if line.startswith("CapEff")]
        os.write(write_fd, f"uid_map={uid_map} CapEff={caps[0]}".encode())
    finally:
        os._exit(0)


def _spawn(call: object) -> str:
    """Run a clone-like call; the child reports through a pipe."""
    read_fd, write_fd = os.pipe()
    pid = call()  # type: ignore[operator]
    if pid == 0:
        _child_report(write_fd)
    os.close(write_fd)
    if pid < 0:
        os.close(read_fd)
        return "refused:" + errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    seen = os.read(read_fd, 1000).decode()
    os.close(read_fd)
    os.waitpid(pid, 0)
    return f"opened: {seen}"


def clone(flags: int) -> str:
    return _spawn(lambda: libc.syscall(SYSCALLS["clone"], flags | signal.SIGCHLD, 0, 0, 0, 0))


def clone3(flags: int) -> str:
    args = CloneArgs(flags=flags, exit_signal=signal.SIGCHLD)
    return _spawn(lambda: libc.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.sizeof(args)))


def unshare(flags: int) -> str:
    if libc.syscall(SYSCALLS["unshare"], flags) == 0:
        return "opened: unshare"
    return "refused:" + errno.errorcode.get(ctypes.get_errno(), "?")


def io_uring_setup() -> str:
    params = (ctypes.c_char * 120)()
    fd = libc.syscall(SYS_IO_URING_SETUP, 8, params)
    if fd >= 0:
        os.close(fd)
        return "opened: io_uring"
    return "refused:" + errno.errorcode.get(ctypes.get_errno(), "?")


def ordinary_work() -> str:
    """What every task does: fork, threads, subprocesses, a shell pipeline."""
    results: list[int] = []
    threads = [threading.Thread(target=results.append, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if sorted(results) != [0, 1, 2, 3]:
        return f"threads: {results}"
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 7:
        return "fork"
    pipeline = subprocess.run(
        ["bash", "-c", "seq 1 50 | sort -rn | head -1; (echo sub) & wait"],
        capture_output=True,
        text=True,
        check=False,
    )
    if pipeline.stdout.split() != ["50", "sub"]:
        return f"pipeline: {pipeline.stdout!r} {pipeline.stderr!r}"
    return "ok"


def main() -> None:
    report = {
        "clone_newuser_newnet": clone(CLONE_NEWUSER | CLONE_NEWNET),
        "clone_newns": clone(CLONE_NEWNS),
        "clone_newpid": clone(CLONE_NEWPID),
        "clone3_newuser": clone3(CLONE_NEWUSER | CLONE_NEWNET),
        "clone3_plain": clone3(0),
        "unshare_newuser": unshare(CLONE_NEWUSER),
        "io_uring_setup": io_uring_setup(),
        "plain_clone": clone(0),
        "works": ordinary_work(),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
