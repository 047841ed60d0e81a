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
from sandfleet.clients.gateway.client import GatewayClient
from sandfleet.gateway.claim_ids import claim_session_names
from sandfleet.rl import EnvConfig, Observation, SandboxEnvBatch
from sandfleet.sandbox.core import SandboxCore
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox
from sandfleet.tool_calls import ToolCall
from tests.cluster.gateway.conftest import MakeClaimer, StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool, pool_pods, spec, until_warm
from tests.cluster.gateway.test_front_door import wait_gone
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    POOLS,
    SESSIONS,
    OperatorProcess,
    wait_no_leftovers,
)

pytestmark = pytest.mark.cluster


def bash(command: str) -> ToolCall:
    return ToolCall("c", "execute_bash", json.dumps({"command": command}))


async def test_a_batch_of_environments_reuses_its_sandboxes_through_the_gateway(
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

    for name in names:
        await wait_gone(kube, f"{SESSIONS.format(ns=namespace)}/{name}")
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/rl")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_a_claimed_sandbox_forks_through_the_gateway_and_forks_reset_to_the_fork_point(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    """Needs a runtime image with RestoreTree working on its Python (Debian's 3.11.2 has no
    tarfile filters; runtime/sandfleet_runtime/tree_unpack.py has its own since this test)."""
    await create_pool(kube, namespace, "forks", 2)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "forks", 2)
    first = await Sandbox.on_cluster(namespace, pool="forks", gateway=gateway.address, token=token)
    async with first:
        await first.bash("echo prepared > ready.txt")
        (fork,) = await first.fork(1)
        async with fork:
            assert isinstance(fork, ClusterSandbox) and fork.name != first.name
            assert (await fork.bash("cat ready.txt")).stdout == "prepared\n"
            await fork.bash("echo changed > ready.txt; echo more > more.txt")
            await fork.reset()
            assert (await fork.bash("cat ready.txt; ls")).stdout.split() == [
                "prepared", "input", "output", "ready.txt",
            ]  # fmt: skip
            assert "more.txt" not in (await first.bash("ls")).stdout
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/forks")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_a_claim_repeated_with_its_claim_id_returns_the_same_sessions(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "idem", 6)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "idem", 6)
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
        # One of them found the other's session: made before, or lost the create to it
        # (which of the two depends on timing; the next test forces the second).
        events = [e["event"] for e in logs]
        assert events.count("claim_repeated") + events.count("claim_raced_its_retry") == 1
        assert raced[0][0].name == raced[1][0].name and raced[0][0].token == raced[1][0].token
        sessions = await kube.checked("GET", SESSIONS.format(ns=namespace))
        assert len(sessions["items"]) == 3  # 2 + 1: no retry claimed a sandbox of its own
        # An attempt cut short after its first sandbox (a count=1 claim stands in for it):
        # the retry keeps that one and claims the rest.
        (partial,) = await client.claim(namespace, pool="idem", claim_id="cut-1")
        whole = await client.claim(namespace, pool="idem", count=2, claim_id="cut-1")
        assert whole[0].name == partial.name and whole[0].token == partial.token
        assert whole[1].name != partial.name
        await client.release(namespace, [s.name for s in whole])
        # The pod the losing racer had patched is not handed out: one claimed pod per session.
        for _ in range(100):
            if len(await pool_pods(kube, namespace, "claimed")) == 3:
                break
            await asyncio.sleep(0.2)
        assert len(await pool_pods(kube, namespace, "claimed")) == 3
        await client.release(namespace, [s.name for s in first] + [raced[0][0].name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/idem")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_a_retry_that_loses_the_create_to_the_first_attempt_returns_its_session(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    """The race forced: a retry reaches another replica after its "made before?" look and
    before the first attempt's create, claims a pod of its own, and the create finds the
    first attempt's session there (AlreadyExists)."""
    await create_pool(kube, namespace, "again", 3)
    first, second = await make_claimer(namespace), await make_claimer(namespace)
    await until_warm(first, namespace, "again", 3)
    await until_warm(second, namespace, "again", 3)
    claim = spec(namespace, "again", claim_id="lost-answer")
    (made,) = await first.claim(claim)
    (name,) = claim_session_names(claim)
    with structlog.testing.capture_logs() as logs:
        again = await second._claim_one(claim, "/testbed", name)
    assert "claim_raced_its_retry" in [e["event"] for e in logs]
    assert (again.name, again.token, again.pod) == (made.name, made.token, made.pod)
    # The pod the retry had claimed and bound is deleted, never handed out.
    for _ in range(150):
        if len(await pool_pods(kube, namespace, "claimed")) == 1:
            break
        await asyncio.sleep(0.2)
    (claimed_pod,) = await pool_pods(kube, namespace, "claimed")
    assert claimed_pod["metadata"]["name"] == made.pod
    assert await first.release(namespace, [made.name]) == 1
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/again")
    await wait_no_leftovers(kube, namespace, timeout_s=60)
