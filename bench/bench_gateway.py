"""The gateway against the real test cluster: claims as clients see them, and what they cost.

    .venv/bin/python -m bench.bench_gateway                       # every round, defaults
    .venv/bin/python -m bench.bench_gateway --rounds sequential overhead --sequential 50

One fresh sf-bench-gw-* namespace; an operator process serving only it (as its ServiceAccount,
with the fleet's session key); `sandfleet-gateway` as its own process, as the gateway's
ServiceAccount (manifests/rbac); a tenant ServiceAccount holding only the tenant Role, whose
token every claim carries; a SandboxPool of real runtime pods on the real node.

Rounds:
  sequential  N claims one at a time: claim -> first execute_bash("true") answered
  bursts      bursts of 20 (x3) and 100 at once: per-claim latency and claims/s
  batch       one Claim with count=100, then every sandbox's first command
  overhead    execute_bash("true") through the gateway vs the same runtime dialled directly
  kubectl     SandboxSessions with poolRef created as kubectl would: create -> Ready
  memory      gateway and operator RSS idle and with N open sessions, scaled to 1,000
  sustained   60 s with 16, then 64 claims always in flight (claim -> first command ->
              release), operator and refill running: claims/s, latency, API writes and CPU
              milliseconds (API server, etcd, kubelet, containerd, operator, gateway) per claim
  churn       N claims and releases, then the time until no session, claimed pod, Secret or
              NetworkPolicy is left (the pool is deleted first)

Latency rounds (sequential, bursts, batch, overhead) run with the operator paused (SIGSTOP)
once the pool is full: the claim path never waits on it, and on this 2-core node its refill
of the claimed pods (container starts) would otherwise dominate every number; --live-refill
keeps it running. Every round waits for the 1-minute load to fall below 4 first.

Results: a table on stdout with the load average of each round, and JSON in
~/.cache/sandfleet/bench/gateway-<time>.json (or --out). Never run while tests use the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

from bench.gateway_bench import rounds
from bench.gateway_bench.on_cluster import gateway_bench_on_cluster
from bench.gateway_bench.rounds import GatewayBench
from bench.gateway_bench.sustained import sustained
from sandfleet.logs import configure_logging

RESULTS_DIR = Path.home() / ".cache" / "sandfleet" / "bench"
ROUNDS = (
    "sequential", "bursts", "batch", "overhead", "kubectl", "memory", "sustained", "churn",
)  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", nargs="+", choices=ROUNDS, default=list(ROUNDS))
    parser.add_argument("--pool", type=int, default=110, help="warm pool size (default 110)")
    parser.add_argument("--sequential", type=int, default=100)
    parser.add_argument("--bursts", type=int, nargs="+", default=[20, 20, 20, 100])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--calls", type=int, default=500, help="overhead calls per path")
    parser.add_argument("--kubectl", type=int, default=30)
    parser.add_argument("--open", type=int, default=100, help="open sessions (memory round)")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--window", type=float, default=60.0, help="sustained window (s)")
    parser.add_argument("--churn", type=int, default=1000)
    parser.add_argument("--churn-concurrency", type=int, default=16)
    parser.add_argument(
        "--live-refill",
        action="store_true",
        help="keep the operator running during latency rounds (refills compete for the CPU)",
    )
    parser.add_argument(
        "--recycle", action="store_true", help="the pool recycles released sandboxes"
    )
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args()


async def run_rounds(bench: GatewayBench, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    print(f"pool of {bench.pool_size} full after {await bench.until_pool_full():.0f}s")
    plan = {
        "sequential": lambda: rounds.sequential(bench, args.sequential),
        "bursts": lambda: _bursts(bench, args.bursts),
        "batch": lambda: rounds.batch(bench, min(args.batch, bench.pool_size)),
        "overhead": lambda: rounds.proxy_overhead(bench, args.calls),
        "kubectl": lambda: rounds.kubectl_pool_ref(bench, args.kubectl),
        "memory": lambda: rounds.memory(bench, min(args.open, bench.pool_size)),
        "sustained": lambda: _sustained(bench, args.in_flight, args.window),
        "churn": lambda: rounds.churn(bench, args.churn, args.churn_concurrency),
    }
    for name in ROUNDS:  # churn last: it deletes the pool
        if name in args.rounds:
            print(f"round {name} ...", flush=True)
            results[name] = await plan[name]()
            print(json.dumps(results[name]), flush=True)
    return results


async def _bursts(bench: GatewayBench, sizes: list[int]) -> list[dict[str, Any]]:
    return [await rounds.burst(bench, min(size, bench.pool_size)) for size in sizes]


async def _sustained(
    bench: GatewayBench, in_flight: list[int], window_s: float
) -> list[dict[str, Any]]:
    return [await sustained(bench, n, window_s) for n in in_flight]


async def main_async(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    async with gateway_bench_on_cluster(
        "gw", args.pool, workdir, pause_operator=not args.live_refill, recycle=args.recycle
    ) as bench:
        results = await run_rounds(bench, args)
        results["gateway_log_tail"] = bench.gateway.log_path.read_text()[-2000:]
        results["gateway_metrics"] = [
            line for line in bench.gateway.metrics().splitlines()
            if line.startswith("sandfleet_gateway") and ("_sum" in line or "_count" in line)
        ]  # fmt: skip
        return results


def main() -> None:
    args = parse_args()
    configure_logging(level="WARNING")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    workdir = RESULTS_DIR / f"gateway-{stamp}"
    workdir.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(main_async(args, workdir))
    out = args.out or RESULTS_DIR / f"gateway-{stamp}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
