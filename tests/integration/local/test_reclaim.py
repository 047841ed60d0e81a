"""Every local sandbox is reclaimed: on close, after its owner crashed, and by the dozen."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from asyncio.subprocess import Process
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandfleet.backends.local import LocalRuntime, launch_local_runtime, sweep_orphans
from sandfleet.clients.runtime.client import RuntimeClient
from tests.integration.local.conftest import (
    MECHANISMS,
    Launcher,
    config_for,
    mechanism_params,
    names,
    pid_namespace,
    read,
    sandbox_processes,
)

pytestmark = pytest.mark.integration

DAEMONS = "sleep 1000 >/dev/null 2>&1 & (setsid sleep 1001 >/dev/null 2>&1 &); echo started"
OWNER = Path(__file__).with_name("owner_process.py")


Scan = Callable[[], Awaitable[set[int]]]


def processes_of(runtime: LocalRuntime) -> Scan:
    namespace = pid_namespace(runtime.agent_pid) if runtime.mechanism != "none" else None

    async def scan() -> set[int]:
        return await asyncio.to_thread(
            sandbox_processes, runtime.sandbox_id, namespace=namespace, cgroups=runtime.cgroups
        )

    return scan


async def until_none_left(scan: Scan, deadline_s: float = 30.0) -> set[int]:
    """Killed processes leave /proc a moment later (seconds for 64 of them at load 100);
    poll, with a deadline, until they have."""
    give_up = time.monotonic() + deadline_s
    for _ in range(1000):
        left = await scan()
        if not left or time.monotonic() > give_up:
            return left
        await asyncio.sleep(0.05)
    return left


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_close_leaves_no_process_and_no_file_behind(
    launch: Launcher, mechanism: str, state_dir: Path
) -> None:
    runtime, client = await launch(mechanism)
    assert (await client.run_command(DAEMONS, timeout_s=30)).stdout == "started\n"
    scan = processes_of(runtime)
    assert len(await scan()) >= 4, "the agent, its shell and both sleeps"
    await client.close()
    await runtime.close()
    assert await until_none_left(scan) == set()
    assert names(state_dir) == []
    await runtime.close()  # idempotent


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_close_kills_everything_even_when_the_agent_ignores_sigterm(
    launch: Launcher, mechanism: str, state_dir: Path
) -> None:
    runtime, client = await launch(mechanism, stop_grace_s=0.5)
    await client.run_command(DAEMONS, timeout_s=30)
    scan = processes_of(runtime)
    assert runtime.agent_pid is not None
    os.kill(runtime.agent_pid, signal.SIGSTOP)  # a hung agent: no graceful shutdown
    await client.close()
    await runtime.close()
    assert await until_none_left(scan) == set()
    assert names(state_dir) == []


async def test_keep_workdir_keeps_the_files_but_not_the_record(
    launch: Launcher, state_dir: Path
) -> None:
    runtime, client = await launch("none", keep_workdir=True)
    await client.run_command("echo kept > output/answer.txt", timeout_s=30)
    await client.close()
    await runtime.close()
    assert read(runtime.paths.answer_file) == "kept\n"
    assert names(state_dir) == [runtime.sandbox_id]


async def start_owner(state_dir: Path, mechanism: str) -> tuple[Process, dict[str, Any]]:
    """A separate control-plane process with one sandbox and daemons in it; its report."""
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        str(OWNER),
        str(state_dir),
        mechanism,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    try:
        assert owner.stdout is not None
        async with asyncio.timeout(60):
            line = await owner.stdout.readline()
        report: dict[str, Any] = json.loads(line)
    except BaseException:
        owner.kill()
        await owner.wait()
        raise
    assert report["output"] == "started\n"
    return owner, report


def scanner(report: dict[str, Any]) -> Scan:
    async def scan() -> set[int]:
        return await asyncio.to_thread(
            sandbox_processes,
            report["sandbox_id"],
            namespace=report["namespace"],
            cgroups=report["cgroups"],
        )

    return scan


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_the_sandbox_of_a_killed_owner_is_reclaimed_by_the_next_sweep(
    mechanism: str, state_dir: Path
) -> None:
    owner, report = await start_owner(state_dir, mechanism)
    scan = scanner(report)
    assert len(await scan()) >= 4
    owner.send_signal(signal.SIGKILL)
    await owner.wait()
    assert report["sandbox_id"] in names(state_dir), "a crash leaves the private dir behind"
    assert await asyncio.to_thread(sweep_orphans, state_dir) == 1
    assert await until_none_left(scan) == set()
    assert names(state_dir) == []
    assert await asyncio.to_thread(sweep_orphans, state_dir) == 0


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_an_interrupted_owner_reclaims_its_sandbox_on_the_way_out(
    mechanism: str, state_dir: Path
) -> None:
    owner, report = await start_owner(state_dir, mechanism)
    scan = scanner(report)
    assert len(await scan()) >= 4
    owner.send_signal(signal.SIGINT)  # ^C in a terminal: KeyboardInterrupt, then atexit
    async with asyncio.timeout(30):
        await owner.wait()
    assert await until_none_left(scan) == set()
    assert names(state_dir) == []


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_sixty_four_sandboxes_start_concurrently_and_close_without_leftovers(
    mechanism: str, state_dir: Path
) -> None:
    count = 64
    started = time.perf_counter()
    runtimes: list[LocalRuntime] = list(
        await asyncio.gather(
            *(launch_local_runtime(config_for(mechanism, state_dir)) for _ in range(count))
        )
    )
    wall_ms = (time.perf_counter() - started) * 1000
    scans = [processes_of(runtime) for runtime in runtimes]
    try:
        assert len({runtime.address for runtime in runtimes}) == count
        client = RuntimeClient(runtimes[-1].address, runtimes[-1].token)
        assert (await client.run_command("echo ok", timeout_s=30)).stdout == "ok\n"
        await client.close()
    finally:
        closing = time.perf_counter()
        await asyncio.gather(*(runtime.close() for runtime in runtimes))
        close_ms = (time.perf_counter() - closing) * 1000
    starts = sorted(runtime.start_ms for runtime in runtimes)
    print(
        f"\n{mechanism}: {count} sandboxes in {wall_ms:.0f} ms wall "
        f"({wall_ms / count:.1f} ms per sandbox), start median {starts[count // 2]:.0f} ms, "
        f"max {starts[-1]:.0f} ms; closed in {close_ms:.0f} ms"
    )
    for scan in scans:
        assert await until_none_left(scan) == set()
    assert names(state_dir) == []
