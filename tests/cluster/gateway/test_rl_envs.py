"""RL environments through the gateway on the real cluster: the real GatewayServer
(in-process, as the gateway's ServiceAccount) in front of the real claim path, the operator
as a process, warm pool pods running the runtime image, and a tenant that is a real
ServiceAccount. A batch of environments claimed once runs episodes with reset-and-reuse,
forks a prepared sandbox, and idempotent claims hand back the same sessions on a retry."""

from __future__ import annotations

import asyncio
import json

import pytest
import structlog

from sandfleet.agent import Task
from sandfleet.gateway_client import GatewayClient
from sandfleet.rl import EnvConfig, Observation, SandboxEnvBatch
from sandfleet.sandbox import ClusterSandbox
from sandfleet.sandbox_core import SandboxCore
from sandfleet.tool_calls import ToolCall
from tests.cluster.gateway import test_front_door as front_door
from tests.cluster.gateway.test_claims import create_pool, pool_pods
from tests.cluster.gateway.test_front_door import StartGateway, until_claimable, wait_gone
from tests.cluster.gateway_clients import tenant_token
from tests.cluster.kube_api import KubeApi
from tests.cluster.operator_harness import POOLS, SESSIONS, wait_no_leftovers

pytestmark = pytest.mark.cluster

start_gateway = front_door.start_gateway
"""Gateway replicas on 127.0.0.1 (the front-door tests' fixture)."""


def bash(command: str) -> ToolCall:
    return ToolCall("c", "execute_bash", json.dumps({"command": command}))


async def test_a_batch_of_environments_reuses_its_sandboxes_and_forks_through_the_gateway(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "rl", 3)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "rl", 3)

    async def reward(answer: str | None, sandbox: SandboxCore) -> float:
        del sandbox
        return 1.0 if answer == "6" else 0.0

    tasks = [
        Task(id=f"rl-{i}", prompt="p", files={"n.txt": f"{i + 1}\n2\n3\n".encode()})
        for i in range(2)
    ]
    batch = await SandboxEnvBatch.on_cluster(
        2, namespace, EnvConfig(max_turns=10), reward=reward, pool="rl",
        gateway=gateway.address, token=token,
    )  # fmt: skip
    async with batch:
        names = [env.sandbox.name for env in batch.envs]  # type: ignore[attr-defined]
        for _episode in range(2):  # the same two claims serve both rounds
            observations = await batch.reset_all(tasks)
            assert all(isinstance(o, Observation) for o in observations), observations
            results = await batch.step([
                bash("export LEAK=1; (setsid sleep 3071 >/dev/null 2>&1 &); echo x > stray.txt;"
                     " echo ${LEAK2:-clean}; ls"),
            ] * 2)  # fmt: skip
            for result in results:
                assert result is not None and not result.info.sandbox_lost, result
                # Nothing of the previous episode: no variable, no file, no process.
                assert "clean\ninput\noutput\n" in result.observation, result.observation
            await batch.step(
                [
                    bash(
                        "export LEAK2=1;"
                        " awk '{s+=$1} END {print s}' input/n.txt > output/answer.txt"
                    )
                ]
                * 2
            )
            ps = await batch.step([bash("ps -eo args | grep -c '[s]leep 3071'")] * 2)
            assert all(
                r is not None and r.observation.split("\\[STDOUT]\n")[1] == "1\n" for r in ps
            )
            done = await batch.step([ToolCall("s", "submit", "{}")] * 2)
            rewards = [r.info.reward for r in done if r is not None]
            assert rewards == [1.0, 0.0]  # task 0 sums to 6, task 1 to 7
        assert [env.sandbox.name for env in batch.envs] == names  # type: ignore[attr-defined]

        first = batch.envs[0].sandbox
        await first.bash("echo prepared > ready.txt")
        (fork,) = await first.fork(1)
        async with fork:
            assert isinstance(fork, ClusterSandbox) and fork.name not in names
            assert (await fork.bash("cat ready.txt")).stdout == "prepared\n"
            await fork.bash("echo changed > ready.txt; echo more > more.txt")
            await fork.reset()
            assert (await fork.bash("cat ready.txt; ls")).stdout.split() == [
                "prepared", "input", "output", "ready.txt",
            ]  # fmt: skip
            assert "more.txt" not in (await first.bash("ls")).stdout
    for name in names:
        await wait_gone(kube, f"{SESSIONS.format(ns=namespace)}/{name}")
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/rl")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_a_claim_repeated_with_its_claim_id_returns_the_same_sessions(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "idem", 4)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "idem", 4)
    async with GatewayClient(gateway.address, token) as client:
        first = await client.claim(namespace, pool="idem", count=2, claim_id="batch-1")
        again = await client.claim(namespace, pool="idem", count=2, claim_id="batch-1")
        assert [(s.name, s.token, s.pod) for s in again] == [
            (s.name, s.token, s.pod) for s in first
        ]
        # A retry racing the first attempt: both answers name the one session made.
        with structlog.testing.capture_logs() as logs:
            raced = await asyncio.gather(
                client.claim(namespace, pool="idem", claim_id="race-1"),
                client.claim(namespace, pool="idem", claim_id="race-1"),
            )
        # Both passed the "made before?" check; one lost the create to AlreadyExists.
        assert [e["event"] for e in logs].count("claim_raced_its_retry") == 1, logs
        assert raced[0][0].name == raced[1][0].name and raced[0][0].token == raced[1][0].token
        sessions = await kube.checked("GET", SESSIONS.format(ns=namespace))
        assert len(sessions["items"]) == 3  # 2 + 1: no retry claimed a sandbox of its own
        # The pod the losing racer had patched is not handed out: one claimed pod per session.
        for _ in range(100):
            if len(await pool_pods(kube, namespace, "claimed")) == 3:
                break
            await asyncio.sleep(0.2)
        assert len(await pool_pods(kube, namespace, "claimed")) == 3
        await client.release(namespace, [s.name for s in first] + [raced[0][0].name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/idem")
    await wait_no_leftovers(kube, namespace, timeout_s=60)
