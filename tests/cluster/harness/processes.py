"""Starting the cluster's processes with logs, waiting for health, and stopping them by pid."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.cluster.harness.components import Component

_children: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this interpreter started, kept referenced until stopped and reaped."""


class ClusterStartError(RuntimeError):
    """A component exited or never became healthy; the message names it and its log."""


@dataclasses.dataclass(frozen=True, slots=True)
class Running:
    """What stop() needs to find the process again without trusting a recycled pid."""

    name: str
    pid: int
    executable: str
    log: str


def start(component: Component, logs_dir: Path) -> tuple[Running, subprocess.Popen[bytes]]:
    """Start one component in its own session, stdout and stderr into logs_dir/NAME.log."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs_dir / f"{component.name}.log"
    argv = component.argv
    if component.nice:
        argv = ["nice", "-n", str(component.nice), *argv]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Own session: a Ctrl-C in the terminal running pytest must not kill the node
            # half-way; teardown stops everything in order.
            start_new_session=True,
        )
    _children[process.pid] = process
    executable = _executable(process, component.argv[0] if component.nice else None)
    return Running(component.name, process.pid, executable, str(log_path)), process


def _executable(process: subprocess.Popen[bytes], exec_target: str | None) -> str:
    """What the pid runs, as is_alive() will check it. Popen returns once its own exec is
    done; behind `nice`, wait (briefly) for nice's exec of the real program too."""
    path = f"/proc/{process.pid}/exe"
    if exec_target is None:
        return os.readlink(path)
    expected = os.path.realpath(shutil.which(exec_target) or exec_target)
    deadline = time.monotonic() + 5.0
    while os.readlink(path) != expected and process.poll() is None:
        if time.monotonic() > deadline:
            raise ClusterStartError(f"{exec_target} never started behind nice")
        time.sleep(0.01)
    return expected


def _healthy(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_healthy(
    component: Component,
    running: Running,
    process: subprocess.Popen[bytes],
    context: ssl.SSLContext,
    timeout_s: float,
) -> None:
    """Poll the health URL until 200 (or the ready check until true), failing early (with the
    log's tail) if the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ClusterStartError(
                f"{component.name} exited with {process.returncode}; "
                f"log {running.log}:\n{tail(Path(running.log))}"
            )
        url_ok = component.health_url is None or _healthy(component.health_url, context)
        if url_ok and (component.ready is None or component.ready()):
            return
        time.sleep(0.2)
    raise ClusterStartError(
        f"{component.name} not healthy after {timeout_s:.0f}s "
        f"({component.health_url or 'ready check'}); "
        f"log {running.log}:\n{tail(Path(running.log))}"
    )


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def is_alive(running: Running) -> bool:
    """True when running.pid still runs running.executable (pids get recycled)."""
    try:
        return os.readlink(f"/proc/{running.pid}/exe") == running.executable
    except OSError:
        return False


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child, so it leaves no zombie."""
    child = _children.get(pid)
    if child is not None:
        child.poll()
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(running: Running, grace_s: float = 10.0) -> None:
    """SIGTERM, wait up to grace_s, then SIGKILL: by pid, and only if the pid is still ours."""
    if is_alive(running):
        os.kill(running.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while is_alive(running) and time.monotonic() < deadline:
            _reap(running.pid)
            time.sleep(0.1)
        if is_alive(running):
            os.kill(running.pid, signal.SIGKILL)
        while is_alive(running):
            _reap(running.pid)
            time.sleep(0.05)
    child = _children.pop(running.pid, None)
    if child is not None:
        child.wait(timeout=5)  # already dead: collects the status so no zombie remains
    else:
        _reap(running.pid)
