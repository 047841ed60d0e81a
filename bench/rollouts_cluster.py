"""The test cluster as bench_rollouts' gateway: a fresh namespace, an operator process
serving only it, `sandfleet-gateway` as its own process (as the gateway's ServiceAccount), a
tenant ServiceAccount's token and a warm SandboxPool of real runtime pods (the same set-up as
bench_gateway: bench/gateway_bench/on_cluster.py). Never run while tests use the cluster."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from bench.gateway_bench.on_cluster import gateway_bench_on_cluster
from bench.gateway_bench.rounds import POOL


@dataclasses.dataclass(frozen=True)
class ClusterGateway:
    address: str
    token: str
    namespace: str
    pool: str


@contextlib.asynccontextmanager
async def cluster_gateway(pool_size: int, workdir: Path) -> AsyncIterator[ClusterGateway]:
    """The gateway, once the pool's `pool_size` pods are idle and Ready (the operator keeps
    running: claim-per-rollout's refills are part of what it costs)."""
    async with gateway_bench_on_cluster("rl", pool_size, workdir, pause_operator=False) as bench:
        await bench.until_pool_full()
        yield ClusterGateway(bench.gateway.address, bench.token, bench.namespace, POOL)
