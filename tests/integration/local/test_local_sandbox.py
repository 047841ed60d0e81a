"""Local sandboxes as real runtime agent processes: serving, private /testbed, process isolation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.backends.local.cgroups import our_cgroup_parents
from sandfleet.backends.local.processes import command_line, pids_tagged
from tests.integration.local.conftest import (
    MECHANISMS,
    NAMESPACED,
    Launcher,
    exists,
    mechanism_params,
    names,
    read,
    read_bytes,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_a_launched_sandbox_serves_health_and_authenticated_commands(
    launch: Launcher, mechanism: str
) -> None:
    runtime, client = await launch(mechanism)
    async with grpc.aio.insecure_channel(runtime.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    result = await client.run_command("pwd; echo hello", timeout_s=30)
    assert result.stdout.split() == [runtime.paths.working_dir, "hello"]
    assert runtime.mechanism == mechanism


@pytest.mark.parametrize("mechanism", mechanism_params(NAMESPACED))
async def test_each_sandbox_has_its_own_testbed_and_the_host_has_none(
    launch: Launcher, mechanism: str
) -> None:
    (first, first_client), (second, second_client) = [await launch(mechanism) for _ in range(2)]
    await first_client.run_command("echo one > /testbed/x", timeout_s=30)
    await second_client.run_command("echo two > /testbed/x", timeout_s=30)
    assert (await first_client.run_command("cat /testbed/x")).stdout == "one\n"
    assert (await second_client.run_command("cat /testbed/x")).stdout == "two\n"
    assert first.paths.working_dir == second.paths.working_dir == "/testbed"
    assert read(first.host_path("/testbed/x")) == "one\n"
    assert read(second.host_path("/testbed/x")) == "two\n"
    assert not exists("/testbed/x")
    listing = await first_client.run_command("ls /testbed")
    assert listing.stdout.split() == ["input", "output", "x"]


@pytest.mark.parametrize("mechanism", mechanism_params(NAMESPACED))
async def test_a_sandbox_sees_only_its_own_processes(launch: Launcher, mechanism: str) -> None:
    (_, busy), (_, watcher) = [await launch(mechanism) for _ in range(2)]
    await busy.run_command("sleep 1000 >/dev/null 2>&1 &", timeout_s=30)
    # The job is forked at once but may not have exec'd `sleep` yet on a loaded machine: until
    # then ps shows a second bash. Wait for the exec (bounded), then look from the other side.
    waited = await busy.run_command(
        "for _ in $(seq 100); do ps -eo args | grep -q '^sleep 1000' && break; sleep 0.05; done",
        timeout_s=30,
    )
    assert waited.exit_code == 0
    assert "sleep 1000" in (await busy.run_command("ps -eo args")).stdout
    seen = await watcher.run_command("ps -eo args", timeout_s=30)
    assert "sleep 1000" not in seen.stdout
    listing = await watcher.run_command("ls /proc", timeout_s=30)
    pids = [int(name) for name in listing.stdout.split() if name.isdigit()]
    assert max(pids) < 100, "the watcher's /proc lists host pids"


@pytest.mark.parametrize("mechanism", mechanism_params(NAMESPACED))
async def test_the_host_is_read_only_and_tmp_and_home_are_private(
    launch: Launcher, mechanism: str, tmp_path: Path
) -> None:
    runtime, client = await launch(mechanism)
    denied = await client.run_command("touch /usr/sandfleet-probe", timeout_s=30)
    assert denied.exit_code != 0
    assert "Read-only file system" in denied.stderr + denied.stdout
    assert not exists("/usr/sandfleet-probe")
    private = await client.run_command(
        "echo t > /tmp/sandfleet-probe && echo h > ~/probe && echo ~", timeout_s=30
    )
    assert private.stdout == "/root\n"
    assert not exists("/tmp/sandfleet-probe")
    assert read(runtime.host_path("/tmp/sandfleet-probe")) == "t\n"
    assert read(runtime.host_path("/root/probe")) == "h\n"
    state = await client.run_command(f"ls -A {runtime.host_root.parent.parent}", timeout_s=30)
    assert runtime.sandbox_id not in state.stdout, "the state dir must not be visible inside"


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_the_agent_gets_a_small_environment_without_the_hosts_secrets(
    launch: Launcher, mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    runtime, client = await launch(mechanism, env={"TASK_FLAG": "on"})
    assert runtime.agent_pid is not None
    agent_env = await asyncio.to_thread(read_bytes, f"/proc/{runtime.agent_pid}/environ")
    assert b"TASK_FLAG=on" in agent_env.split(b"\0")
    assert b"sk-do-not-leak" not in agent_env
    assert "sk-do-not-leak" not in (await client.run_command("env", timeout_s=30)).stdout


async def test_the_models_shell_sees_the_configured_environment(launch: Launcher) -> None:
    _, client = await launch("none", env={"TASK_FLAG": "on"})
    env = (await client.run_command("env", timeout_s=30)).stdout
    assert "TASK_FLAG=on" in env
    assert "HOME=" in env


async def test_without_namespaces_the_sandbox_works_below_its_private_dir_and_warns(
    launch: Launcher,
) -> None:
    with structlog.testing.capture_logs() as logs:
        runtime, client = await launch("none")
    degraded = [entry for entry in logs if entry["event"] == "sandbox_isolation_degraded"]
    assert len(degraded) == 1
    assert degraded[0]["log_level"] == "warning"
    assert "none" in degraded[0]["reason"]
    assert runtime.paths.working_dir == str(runtime.host_root / "testbed")
    assert runtime.paths.answer_file == str(runtime.host_root / "testbed/output/answer.txt")
    await client.run_command("echo 42 > output/answer.txt", timeout_s=30)
    assert read(runtime.paths.answer_file) == "42\n"


async def test_an_agent_that_fails_to_start_raises_with_its_log_and_leaves_nothing(
    state_dir: Path,
) -> None:
    from sandfleet.backends.local import launch_local_runtime
    from sandfleet.errors import SandboxStartError

    config = LocalSandboxConfig(isolation="none", state_dir=state_dir, log_level="NO-SUCH-LEVEL")
    with pytest.raises(SandboxStartError, match="NO-SUCH-LEVEL"):
        await launch_local_runtime(config)
    assert names(state_dir) == []


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_the_token_is_never_on_a_command_line(launch: Launcher, mechanism: str) -> None:
    runtime, _ = await launch(mechanism)
    processes = await asyncio.to_thread(pids_tagged, [runtime.sandbox_id])
    command_lines = [" ".join(command_line(pid)) for pid in processes[runtime.sandbox_id]]
    assert any("sandfleet_runtime" in line for line in command_lines)
    assert not [line for line in command_lines if runtime.token in line]


@pytest.mark.parametrize("mechanism", mechanism_params(MECHANISMS))
async def test_each_sandbox_limits_its_own_processes(launch: Launcher, mechanism: str) -> None:
    if not our_cgroup_parents():
        pytest.skip("cgroupfs is not writable here: the runtime can only warn about limits")
    sandboxes = [await launch(mechanism, max_processes=40) for _ in range(2)]
    for runtime, client in sandboxes:
        own = (await client.run_command("cat /proc/self/cgroup", timeout_s=30)).stdout
        pids = next(
            (line for line in own.splitlines() if "pids" in line.split(":")[1].split(",")),
            next(line for line in own.splitlines() if line.startswith("0::")),
        )
        path = pids.split(":", 2)[2]
        assert f"/sandfleet-{runtime.sandbox_id}/" in path + "/", "not below this sandbox"
        base = "/sys/fs/cgroup/pids" if ":pids:" in pids else "/sys/fs/cgroup"
        limit = await client.run_command(f"cat {base}{path}/pids.max", timeout_s=30)
        assert limit.stdout.strip() == "40"
