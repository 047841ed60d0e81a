"""RL rollouts benchmark: reset-and-reuse vs claim-per-rollout, reset() latency, fork of a
large working tree. Real sandboxes (local runtime agents, or claimed through a gateway).

    .venv/bin/python -m bench.bench_rollouts [--rollouts 40] [--concurrency 4] [--json out.json]
    .venv/bin/python -m bench.bench_rollouts --gateway HOST:PORT --token T --namespace NS --pool P
    .venv/bin/python -m bench.bench_rollouts --cluster  # test cluster: bench/rollouts_cluster.py

A rollout is 5 scripted turns through SandboxEnv (the policy is a fixed list of tool calls,
so the numbers are the sandbox side alone, no model): write a file, run a small Python
program, edit a file with str_replace_editor, write the answer, submit. Modes:
  reuse     `concurrency` sandboxes opened once; each rollout is env.reset(task) + 5 steps
  claim     each rollout opens a new sandbox (a local runtime start, or a gateway Claim),
            runs env.reset(task) + 5 steps and closes (releases) it
  reset     p50/p99 of env.reset(task) in the reuse mode (client-timed: the Reset RPC, one
            small task file upload), with the runtime's own Reset duration beside it
  fork      one sandbox whose tree holds --fork-mb MB (random bytes, 1 MB files), forked
            into --forks sandboxes: snapshot + n sandboxes opened + n restores
Prints JSON with the 1-minute load average before and after each mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sandfleet.agent import Task
from sandfleet.backends.local import LocalBackend, LocalSandboxConfig
from sandfleet.rl import EnvConfig, SandboxEnv
from sandfleet.sandbox.core import SandboxCore, close_all
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tool_calls import ToolCall
from tests.support.stats import percentile

Opener = Callable[[int], Awaitable[list[SandboxCore]]]

TASK = Task(id="bench", prompt="Sum the numbers.", files={"numbers.txt": b"1\n2\n3\n4\n"})


def _calls(working_dir: str) -> list[ToolCall]:
    """The 5 scripted turns (4 tools and a submit)."""

    def call(name: str, arguments: dict[str, Any]) -> ToolCall:
        return ToolCall("c", name, json.dumps(arguments))

    return [
        call("execute_bash", {"command": "mkdir -p output && cp input/numbers.txt work.txt"}),
        call("execute_bash", {"command": "python3 -c 'print(sum(map(int, open(\"work.txt\"))))'"}),
        call("str_replace_editor", {"command": "str_replace", "path": f"{working_dir}/work.txt",
                                     "old_str": "4", "new_str": "5"}),
        call("execute_bash",
             {"command": "awk '{s+=$1} END {print s}' work.txt > output/answer.txt"}),
        call("submit", {}),
    ]  # fmt: skip


async def _rollout(env: SandboxEnv) -> tuple[float, float]:
    """One episode; returns env.reset()'s seconds, client-timed and the runtime's own."""
    started = time.perf_counter()
    observation = await env.reset(TASK)
    reset_s = time.perf_counter() - started
    for call in _calls(env.sandbox.paths.working_dir):
        _, done, info = await env.step(call)
        if info.sandbox_lost or info.malformed:
            raise RuntimeError(f"rollout failed: {info}")
    if not done or info.answer != "11":
        raise RuntimeError(f"unexpected end: {info}")
    return reset_s, observation.reset.duration_s


async def _reuse(opener: Opener, rollouts: int, concurrency: int) -> dict[str, Any]:
    sandboxes = await opener(concurrency)
    envs = [SandboxEnv(s, EnvConfig(max_turns=10)) for s in sandboxes]
    reset_s: list[float] = []
    server_s: list[float] = []
    queue = list(range(rollouts))

    async def worker(env: SandboxEnv) -> None:
        while queue:
            queue.pop()
            # Each reset undoes the previous rollout of this sandbox (the warm-up's first).
            client, server = await _rollout(env)
            reset_s.append(client)
            server_s.append(server)

    try:
        await asyncio.gather(*(_rollout(env) for env in envs))  # warm-up
        started = time.perf_counter()
        await asyncio.gather(*(worker(env) for env in envs))
        elapsed = time.perf_counter() - started
    finally:
        await close_all(sandboxes)
    ms = 1000.0
    return {
        "rollouts": rollouts,
        "rollouts_per_s": rollouts / elapsed,
        "env_reset_p50_ms": percentile(reset_s, 0.5) * ms,
        "env_reset_p99_ms": percentile(reset_s, 0.99) * ms,
        "runtime_reset_p50_ms": percentile(server_s, 0.5) * ms,
        "runtime_reset_p99_ms": percentile(server_s, 0.99) * ms,
    }


async def _claim_per_rollout(opener: Opener, rollouts: int, concurrency: int) -> dict[str, Any]:
    queue = list(range(rollouts))
    open_s: list[float] = []

    async def worker() -> None:
        while queue:
            queue.pop()
            started = time.perf_counter()
            (sandbox,) = await opener(1)
            open_s.append(time.perf_counter() - started)
            try:
                await _rollout(SandboxEnv(sandbox, EnvConfig(max_turns=10)))
            finally:
                await sandbox.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "rollouts": rollouts,
        "rollouts_per_s": rollouts / elapsed,
        "open_p50_ms": percentile(open_s, 0.5) * 1000,
        "open_p99_ms": percentile(open_s, 0.99) * 1000,
    }


async def _fork(opener: Opener, megabytes: int, forks: int) -> dict[str, Any]:
    (parent,) = await opener(1)
    try:
        made = await parent.bash(
            f"mkdir -p big && for i in $(seq {megabytes}); do head -c 1048576 /dev/urandom"
            " > big/f$i.bin; done && cat big/*.bin | md5sum",
            timeout_s=600,
        )
        digest = made.stdout.split()[0]
        started = time.perf_counter()
        snapshot = await parent.snapshot()
        snapshot_s = time.perf_counter() - started
        snapshot.close()
        started = time.perf_counter()
        # A 100 MB tree is above the runtime's 64 MB reset-baseline bound: the forks hold
        # the tree but reset to the image's (as_baseline=False).
        children = await parent.fork(forks, as_baseline=False)
        fork_s = time.perf_counter() - started
        try:
            sums = await asyncio.gather(
                *(c.bash("cat big/*.bin | md5sum", timeout_s=600) for c in children)
            )
            assert all(s.stdout.split()[0] == digest for s in sums), "a fork differs"
        finally:
            await close_all(children)
    finally:
        await parent.close()
    return {
        "tree_mb": megabytes,
        "forks": forks,
        "snapshot_s": snapshot_s,
        "fork_s": fork_s,
        "fork_mb_per_s": megabytes * forks / fork_s,
    }


def _local_opener(config: LocalSandboxConfig) -> Opener:
    backend = LocalBackend(config)

    async def open_many(count: int) -> list[SandboxCore]:
        return list(await asyncio.gather(*(Sandbox.open(backend) for _ in range(count))))

    return open_many


def _gateway_opener(args: argparse.Namespace) -> Opener:
    async def open_many(count: int) -> list[SandboxCore]:
        return list(
            await Sandbox.on_cluster_many(
                count, args.namespace, pool=args.pool, gateway=args.gateway, token=args.token
            )
        )

    return open_many


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    if args.cluster:
        from bench.rollouts_cluster import cluster_gateway

        with tempfile.TemporaryDirectory(prefix="sandfleet-bench-rollouts-") as tmp:
            # Every claim-per-rollout takes a warm pod; the pool refills meanwhile.
            async with cluster_gateway(args.concurrency * 3, Path(tmp)) as gateway:
                args.gateway, args.token = gateway.address, gateway.token
                args.namespace, args.pool = gateway.namespace, gateway.pool
                return await _run_modes(args)
    return await _run_modes(args)


async def _run_modes(args: argparse.Namespace) -> dict[str, Any]:
    opener = _gateway_opener(args) if args.gateway else _local_opener(LocalSandboxConfig())
    results: dict[str, Any] = {"backend": "gateway" if args.gateway else "local"}
    modes: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
        ("reuse", lambda: _reuse(opener, args.rollouts, args.concurrency)),
        ("claim", lambda: _claim_per_rollout(opener, args.rollouts, args.concurrency)),
    ]
    if args.fork_mb:
        modes.append(("fork", lambda: _fork(opener, args.fork_mb, args.forks)))
    for name, run in modes:
        load_before = os.getloadavg()[0]
        results[name] = await run()
        results[name]["load_1m_before"] = load_before
        results[name]["load_1m_after"] = os.getloadavg()[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--fork-mb", type=int, default=100, help="0: skip the fork round")
    parser.add_argument("--forks", type=int, default=8)
    parser.add_argument("--gateway", help="claim through this gateway instead of locally")
    parser.add_argument("--token", help="the caller's Kubernetes token (with --gateway)")
    parser.add_argument("--namespace")
    parser.add_argument("--pool")
    parser.add_argument(
        "--cluster", action="store_true", help="through a gateway on the test cluster (set up here)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(_bench(args))
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
