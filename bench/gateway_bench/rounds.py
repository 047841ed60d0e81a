"""The gateway bench's rounds: each returns a JSON-ready dict of what it measured.

A "claim" is what a client sees: Sandbox.on_cluster through the gateway until its first
`execute_bash("true")` has answered (claim -> first command). Releases are not timed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.gateway_bench.process import GatewayProcess
from bench.operator_bench.host import load_average, rss_mib
from bench.operator_bench.launcher import BenchOperator
from sandfleet import Sandbox
from sandfleet.api import API_VERSION, POOL_PLURAL, SESSION_PLURAL
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError
from sandfleet.kube import KubeClient, resource_path
from sandfleet.sandbox.facade import ClusterSandbox
from tests.support.stats import percentile

POOL = "warm"
SETTLED_LOAD = 4.0
"""A round starts once the 1-minute load average is below this (2 cores)."""


@dataclasses.dataclass
class GatewayBench:
    kube: KubeClient
    """The admin's client (setup, kubectl-like creates, leftover checks)."""
    namespace: str
    gateway: GatewayProcess
    operator: BenchOperator
    token: str
    """The tenant's ServiceAccount token (only the tenant Role)."""
    pool_size: int
    pause_operator: bool = True
    api_metrics: Callable[[], str] = lambda: ""
    """The API server's /metrics text (the sustained round's writes per claim)."""
    splits: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    """(claim returned, first command answered) seconds of every claim, for where time goes."""

    async def claim(self) -> ClusterSandbox:
        return await Sandbox.on_cluster(
            self.namespace, pool=POOL, gateway=self.gateway.address, token=self.token
        )

    async def claim_and_first_command(self) -> tuple[float, ClusterSandbox]:
        started = time.perf_counter()
        sandbox = await self.claim()
        claimed = time.perf_counter()
        result = await sandbox.bash("true")
        assert result.exit_code == 0, result
        done = time.perf_counter()
        self.splits.append((claimed - started, done - claimed))
        return done - started, sandbox

    async def idle_ready(self) -> int:
        selector = f"sandfleet.dev/pool={POOL},sandfleet.dev/state=idle"
        pods = await self.kube.list(
            resource_path("v1", "pods", self.namespace), label_selector=selector
        )
        return sum(
            1
            for pod in pods
            if not pod["metadata"].get("deletionTimestamp")
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
        )

    async def until_pool_full(self, timeout_s: float = 600, settle_s: float = 30) -> float:
        """Seconds until every pool pod is idle and Ready; then the operator is paused when
        asked (so refills started by the round's claims do not compete for the 2 cores) and
        the machine gets up to `settle_s` for the 1-minute load to fall below SETTLED_LOAD
        after starting them (110 idle runtimes keep it above that on their own)."""
        started = time.monotonic()
        self.operator_paused(False)
        while await self.idle_ready() < self.pool_size:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"pool not full after {timeout_s}s")
            await asyncio.sleep(1)
        self.operator_paused(self.pause_operator)
        full = time.monotonic()
        while load_average()[0] > SETTLED_LOAD and time.monotonic() - full < settle_s:  # noqa: ASYNC110 - polls /proc/loadavg
            await asyncio.sleep(1)
        return time.monotonic() - started

    def operator_paused(self, paused: bool) -> None:
        """SIGSTOP/SIGCONT the operator: the claim path never waits on it (adoption comes
        after), but its refills (100 pod starts) would take the whole machine meanwhile."""
        os.kill(self.operator.pid, signal.SIGSTOP if paused else signal.SIGCONT)


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    values = sorted(s * 1000 for s in seconds)
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 0.50), 1),
        "p90_ms": round(percentile(values, 0.90), 1),
        "p99_ms": round(percentile(values, 0.99), 1),
        "max_ms": round(values[-1], 1),
    }


async def _release_all(sandboxes: list[ClusterSandbox]) -> None:
    await asyncio.gather(*(s.close() for s in sandboxes), return_exceptions=True)


async def sequential(bench: GatewayBench, count: int) -> dict[str, Any]:
    """`count` claims one at a time, each released (untimed) before the next."""
    await bench.until_pool_full()
    load = load_average()
    latencies = []
    bench.splits.clear()
    for _ in range(count):
        seconds, sandbox = await bench.claim_and_first_command()
        latencies.append(seconds)
        await sandbox.close()
    return {
        "load_before": load,
        "load_after": load_average(),
        **summary_ms(latencies),
        "first_claim_ms": round(latencies[0] * 1000, 1),  # the process's first: channels cold
        "claim_part": summary_ms([claim for claim, _ in bench.splits]),
        "first_command_part": summary_ms([first for _, first in bench.splits]),
    }


async def burst(bench: GatewayBench, size: int) -> dict[str, Any]:
    """`size` claims at once: each one's claim -> first command, and the burst's claims/s."""
    await bench.until_pool_full()
    load = load_average()
    started = time.perf_counter()
    results = await asyncio.gather(*(bench.claim_and_first_command() for _ in range(size)))
    wall = time.perf_counter() - started
    await _release_all([sandbox for _, sandbox in results])
    return {
        "size": size,
        "load_before": load,
        "load_after": load_average(),
        "wall_s": round(wall, 3),
        "claims_per_s": round(size / wall, 1),
        **summary_ms([seconds for seconds, _ in results]),
    }


async def batch(bench: GatewayBench, count: int) -> dict[str, Any]:
    """One Claim with count=N, then every sandbox's first command."""
    await bench.until_pool_full()
    load = load_average()
    started = time.perf_counter()
    sandboxes = await Sandbox.on_cluster_many(
        count, bench.namespace, pool=POOL, gateway=bench.gateway.address, token=bench.token
    )
    claimed = time.perf_counter() - started
    await asyncio.gather(*(s.bash("true") for s in sandboxes))
    wall = time.perf_counter() - started
    await _release_all(sandboxes)
    return {
        "count": count,
        "load_before": load,
        "load_after": load_average(),
        "claim_s": round(claimed, 3),
        "to_all_first_commands_s": round(wall, 3),
        "claims_per_s": round(count / wall, 1),
    }


async def _timed_calls(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


async def proxy_overhead(bench: GatewayBench, calls: int) -> dict[str, Any]:
    """`execute_bash("true")` through the gateway against the same runtime dialled directly
    (pod IP, session token), interleaved in blocks so drift hits both alike."""
    await bench.until_pool_full()
    load = load_average()
    sandbox = await bench.claim()
    info = sandbox.session
    pod = await bench.kube.get(resource_path("v1", "pods", bench.namespace, info.pod))
    direct = RuntimeClient(f"{pod['status']['podIP']}:50051", info.token)  # type: ignore[union-attr]
    via, straight = [], []
    try:
        for _ in range(calls // 50):
            via += await _timed_calls(lambda: sandbox.client.run_command("true"), 50)
            straight += await _timed_calls(lambda: direct.run_command("true"), 50)
    finally:
        await direct.close()
        await sandbox.close()
    gateway, plain = summary_ms(via), summary_ms(straight)
    return {
        "load_before": load,
        "load_after": load_average(),
        "through_gateway": gateway,
        "direct": plain,
        "overhead_p50_ms": round(gateway["p50_ms"] - plain["p50_ms"], 2),
    }


async def kubectl_pool_ref(bench: GatewayBench, count: int) -> dict[str, Any]:
    """SandboxSessions with poolRef created as kubectl would (no gateway): create -> Ready,
    observed by polling the session every 10 ms."""
    load = load_average()
    sessions = resource_path(API_VERSION, SESSION_PLURAL, bench.namespace)
    latencies = []
    for i in range(count):
        await bench.until_pool_full(settle_s=1)
        bench.operator_paused(False)  # the operator is the one claiming here
        name = f"kubectl-{i}"
        body = {"apiVersion": API_VERSION, "kind": "SandboxSession",
                "metadata": {"name": name}, "spec": {"poolRef": {"name": POOL}}}  # fmt: skip
        started = time.perf_counter()
        await bench.kube.create(sessions, body)
        while True:
            status = (await bench.kube.get(f"{sessions}/{name}")).get("status") or {}
            if status.get("phase") == "Ready":
                break
            await asyncio.sleep(0.01)
        latencies.append(time.perf_counter() - started)
        await bench.kube.delete(f"{sessions}/{name}")
    return {"load_before": load, "load_after": load_average(), **summary_ms(latencies)}


async def memory(bench: GatewayBench, open_count: int) -> dict[str, Any]:
    """RSS of the gateway and the operator with no session and with `open_count` open ones,
    scaled to 1,000 sessions (the node holds far fewer real sandboxes than that)."""
    await bench.until_pool_full()
    bench.operator_paused(False)
    await asyncio.sleep(5)
    idle = {"gateway": rss_mib(bench.gateway.pid), "operator": rss_mib(bench.operator.pid)}
    sandboxes = await Sandbox.on_cluster_many(
        open_count, bench.namespace, pool=POOL, gateway=bench.gateway.address, token=bench.token
    )
    await asyncio.gather(*(s.bash("true") for s in sandboxes))
    await asyncio.sleep(10)  # the operator adopts them and starts its idle probes
    busy = {"gateway": rss_mib(bench.gateway.pid), "operator": rss_mib(bench.operator.pid)}
    await _release_all(sandboxes)
    per_1000 = {
        name: round(((busy[name] or 0) - (idle[name] or 0)) / open_count * 1000, 1) for name in idle
    }
    return {"open": open_count, "idle_mib": idle, "open_mib": busy, "per_1000_mib": per_1000}


async def churn(bench: GatewayBench, count: int, concurrency: int) -> dict[str, Any]:
    """`count` claims and releases, `concurrency` at a time; then the time until nothing of
    them is left (sessions, claimed pods, their Secrets and NetworkPolicies). The operator
    runs throughout: refills and reclaims are part of what this measures."""
    await bench.until_pool_full()
    bench.operator_paused(False)
    load = load_average()
    started = time.perf_counter()
    semaphore = asyncio.Semaphore(concurrency)
    failures: list[str] = []

    async def one() -> None:
        async with semaphore:
            try:
                _, sandbox = await bench.claim_and_first_command()
                await sandbox.close()
            except (SandfleetError, AssertionError) as error:  # counted and reported
                failures.append(f"{type(error).__name__}: {error}"[:200])

    await asyncio.gather(*(one() for _ in range(count)))
    wall = time.perf_counter() - started
    await bench.kube.delete(resource_path(API_VERSION, POOL_PLURAL, bench.namespace, POOL))
    drained = time.perf_counter()
    left = await leftovers(bench.kube, bench.namespace)
    while left and time.perf_counter() - drained < 300:
        await asyncio.sleep(1)
        left = await leftovers(bench.kube, bench.namespace)
    return {
        "count": count,
        "concurrency": concurrency,
        "load_before": load,
        "load_after": load_average(),
        "wall_s": round(wall, 1),
        "claims_per_s": round(count / wall, 1),
        "failures": len(failures),
        "failure_examples": sorted(set(failures))[:5],
        "leftovers_after_s": round(time.perf_counter() - drained, 1),
        "leftovers": left,
    }


async def leftovers(kube: KubeClient, namespace: str) -> list[str]:
    """Sessions, pods, Secrets and NetworkPolicies of sandfleet still in the namespace."""
    found = []
    for api, plural in (
        (API_VERSION, SESSION_PLURAL),
        ("v1", "pods"),
        ("v1", "secrets"),
        ("networking.k8s.io/v1", "networkpolicies"),
    ):
        selector = None if plural == SESSION_PLURAL else "app.kubernetes.io/managed-by"
        items = await kube.list(resource_path(api, plural, namespace), label_selector=selector)
        found += [f"{plural}/{item['metadata']['name']}" for item in items]
    return found
