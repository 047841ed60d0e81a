"""Local sandboxes for tests: one per isolation mechanism this machine offers, always closed."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandfleet.backends.local import LocalRuntime, LocalSandboxConfig, launch_local_runtime
from sandfleet.backends.local.cgroups import members
from sandfleet.backends.local.isolation import probe
from sandfleet.backends.local.processes import pids_tagged
from sandfleet.clients.runtime.client import RuntimeClient

MECHANISMS = ("bwrap", "unshare", "none")
NAMESPACED = ("bwrap", "unshare")


THROWAWAY_UID = 2**31 - 2**24 - 7  # below the sandboxes' host uids; in no passwd


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """State dir and HOME for a run as the throwaway uid (the attack tests), reachable by it."""
    base = Path(tempfile.mkdtemp(prefix="sandfleet-attack-home-"))
    (base / "state").mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, THROWAWAY_UID, THROWAWAY_UID)
        shutil.chown(base / "state", THROWAWAY_UID, THROWAWAY_UID)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _unavailable(mechanism: str) -> str | None:
    """Why a mechanism cannot run here (None: it can), asked the way the launcher asks."""
    return asyncio.run(probe(mechanism))  # type: ignore[arg-type]


def mechanism_params(names: tuple[str, ...]) -> list[Any]:
    params = []
    for name in names:
        reason = _unavailable(name)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def config_for(mechanism: str, state_dir: Path, **overrides: Any) -> LocalSandboxConfig:
    if mechanism == "none":
        return LocalSandboxConfig(isolation="none", state_dir=state_dir, **overrides)
    return LocalSandboxConfig(
        isolation="namespaces",
        namespace_tool=mechanism,  # type: ignore[arg-type]
        state_dir=state_dir,
        **overrides,
    )


def read(path: str | Path) -> str:
    return Path(path).read_text()


def read_bytes(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def exists(path: str | Path) -> bool:
    return Path(path).exists()


def names(directory: Path) -> list[str]:
    """Entries of a directory, sorted ([] if it does not exist)."""
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def pid_namespace(pid: int | None) -> str | None:
    """The PID namespace a process lives in (e.g. "pid:[4026532281]"), None if unknown."""
    if pid is None:
        return None
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def sandbox_processes(
    sandbox_id: str, *, namespace: str | None, cgroups: Iterable[str | Path] = ()
) -> set[int]:
    """Every host process of a sandbox, found three independent ways: its PID namespace
    (when namespaced; the host's own namespace never counts), its cgroups, its id tag."""
    found = set(pids_tagged([sandbox_id])[sandbox_id])
    found |= members([Path(c) for c in cgroups])
    if namespace is not None and namespace != pid_namespace(os.getpid()):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and pid_namespace(int(entry.name)) == namespace:
                found.add(int(entry.name))
    return found


Launcher = Callable[..., Awaitable[tuple[LocalRuntime, RuntimeClient]]]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
async def launch(state_dir: Path) -> AsyncIterator[Launcher]:
    """launch(mechanism, **config) -> (runtime, authenticated client); all closed afterwards."""
    started: list[tuple[LocalRuntime, RuntimeClient]] = []

    async def start(mechanism: str, **overrides: Any) -> tuple[LocalRuntime, RuntimeClient]:
        runtime = await launch_local_runtime(config_for(mechanism, state_dir, **overrides))
        client = RuntimeClient(runtime.address, runtime.token, rpc_timeout_s=30)
        started.append((runtime, client))
        return runtime, client

    yield start
    for runtime, client in started:
        await client.close()
        await runtime.close()
