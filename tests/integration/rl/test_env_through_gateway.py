"""SandboxEnvBatch through the gateway: the real gateway in-process (auth, routes, the runtime
proxy) in front of REAL local sandboxes; its claim path and the Kubernetes API server it
asks are stand-ins (tests/support/client_gateway.py), as no cluster runs here. The cluster
tier (tests/cluster/gateway/test_rl_envs.py) runs the same against real pods."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from sandfleet.agent import Task
from sandfleet.backends.local import LocalRuntime, LocalSandboxConfig, launch_local_runtime
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError
from sandfleet.rl import Observation, SandboxEnvBatch
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox
from sandfleet.tool_calls import ToolCall
from tests.support.client_gateway import CALLER_TOKEN, NAMESPACE, ClientGateway, client_gateway

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway() -> AsyncIterator[ClientGateway]:
    runtimes: list[LocalRuntime] = []
    try:
        for _ in range(3):
            runtimes.append(await launch_local_runtime(LocalSandboxConfig()))
        if any(r.paths.working_dir != "/testbed" for r in runtimes):
            pytest.skip("needs namespaced local sandboxes (each its own /testbed)")
        async with client_gateway([(r.address, r.token) for r in runtimes], "/testbed") as gw:
            yield gw
    finally:
        for runtime in runtimes:
            await runtime.close()


def bash(command: str) -> ToolCall:
    return ToolCall("c", "execute_bash", json.dumps({"command": command}))


async def test_a_batch_claimed_through_the_gateway_runs_episodes_and_forks(
    gateway: ClientGateway,
) -> None:
    options = {"gateway": gateway.address, "token": CALLER_TOKEN}
    tasks = [Task(id=f"g{i}", prompt="p", files={"n.txt": f"{i}\n".encode()}) for i in range(2)]
    async with await SandboxEnvBatch.on_cluster(2, NAMESPACE, pool="py", **options) as batch:
        assert all(isinstance(env.sandbox, ClusterSandbox) for env in batch.envs)
        observations = await batch.reset_all(tasks)
        assert all(isinstance(o, Observation) for o in observations)
        results = await batch.step(
            [bash("cat input/n.txt; echo x > left.txt"), bash("sleep 0.2; exit 4")]
        )
        assert results[0] is not None and "\n0\n" in results[0].observation + "\n"
        assert results[1] is not None and results[1].observation.startswith(
            "Exit code: Error: Exit code 4"
        )
        # Reset through the proxy: the next episode sees nothing of this one.
        await batch.reset_all(tasks)
        results = await batch.step([bash("ls"), bash("ls")])
        assert all(r is not None and r.observation.endswith("input\noutput\n") for r in results)

        # A fork comes from a new claim of the same request, as the same caller.
        first = batch.envs[0].sandbox
        await first.bash("echo prepared > ready.txt")
        (fork,) = await first.fork(1)
        try:
            assert isinstance(fork, ClusterSandbox) and fork.name not in {
                env.sandbox.name
                for env in batch.envs  # type: ignore[attr-defined]
            }
            assert (await fork.bash("cat ready.txt")).stdout == "prepared\n"
            await fork.bash("rm ready.txt")
            await fork.reset()
            assert (await fork.bash("cat ready.txt")).stdout == "prepared\n"
        finally:
            await fork.close()
    claims = [request for method, request, _ in gateway.calls if method == "Claim"]
    assert [c.count for c in claims] == [2, 1]
    assert all(c.pool == "py" and c.namespace == NAMESPACE for c in claims)
    assert gateway.sessions == []  # every session released


async def test_an_idempotent_claim_sends_its_claim_id(gateway: ClientGateway) -> None:
    options = {"gateway": gateway.address, "token": CALLER_TOKEN}
    sandboxes = await Sandbox.on_cluster_many(
        1, NAMESPACE, pool="py", claim_id="batch-1", **options
    )
    await sandboxes[0].close()
    (claim,) = [request for method, request, _ in gateway.calls if method == "Claim"]
    assert claim.claim_id == "batch-1"


async def test_a_command_whose_client_went_away_is_collected_through_the_gateway(
    gateway: ClientGateway,
) -> None:
    options = {"gateway": gateway.address, "token": CALLER_TOKEN}
    (sandbox,) = await Sandbox.on_cluster_many(1, NAMESPACE, pool="py", **options)
    async with sandbox:
        first = RuntimeClient(
            gateway.address,
            sandbox.session.token,  # type: ignore[union-attr]
            session=sandbox.session.session,  # type: ignore[union-attr]
            caller_token=lambda: CALLER_TOKEN,
        )
        call = asyncio.ensure_future(
            first.run_detached("sleep 1; echo late; exit 5", command_id="gw-7.t1")
        )
        for _ in range(500):
            if (await sandbox.stats()).running_commands == 1:
                break
            await asyncio.sleep(0.01)
        await first.close()  # the trainer's connection is gone mid-command
        with pytest.raises((asyncio.CancelledError, SandfleetError)):
            await call
        result = await sandbox.client.attach_command("gw-7.t1", timeout_s=10)
    assert (result.exit_code, result.stdout) == (5, "late\n")
    attached = [m for m, _ in gateway.proxied if m.endswith("/AttachCommand")]
    assert len(attached) == 1  # it went through the gateway's proxy
