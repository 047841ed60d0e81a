"""Suspend/resume benchmark on the running test cluster, with a warm pool whose refill is live.

    .venv/bin/python -m tests.cluster.harness.cluster up      # under the cluster lock
    .venv/bin/python -m bench.bench_suspend_cluster [--sizes-mb 1 10 100] [--rounds 10]
        [--many 1000 --workers 8] [--skip-latency] [--json out.json]

Rounds, in a fresh sf-bench-suspend-* namespace with an operator process of its own (the
production intervals; snapshots on a local volume, as the chart's PVC store):
  latency  one session per tree size (incompressible 100 kB files in /testbed/data, a shell
           cd'd there with an exported variable), suspended and resumed `--rounds` times:
           p50/p99 from the `spec.suspend` patch to the phase a watching client sees
           (Suspended; the pod released; Ready), the pool full before each step so every
           resume is warm; each resume is checked (cwd, env, file count). Where the time
           goes comes from the operator's own log (per-step milliseconds).
  many     `--many` sessions each created on the pool, Ready, suspended and released,
           `--workers` at a time (the pool recycles, as sustained claim traffic would):
           pods/Secrets/NetworkPolicies held (0), API objects and bytes per suspended
           session, snapshot bytes, the operator's RSS and CPU at rest, one resumed.

Results: JSON on stdout and in ~/.cache/sandfleet/bench/suspend-<time>.json (or --json),
the operator's log beside it. Never run while tests use the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

from bench.operator_bench.host import load_average
from bench.suspend_bench import fleet
from bench.suspend_bench.latency import size_round
from bench.suspend_bench.on_cluster import suspend_bench_on_cluster
from bench.suspend_bench.operator_log import medians, steps_by_session
from sandfleet.logs import configure_logging

RESULTS_DIR = Path.home() / ".cache" / "sandfleet" / "bench"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--rounds", type=int, default=10, help="suspend+resume rounds per size")
    parser.add_argument("--pool", type=int, default=2, help="warm pool of the latency rounds")
    parser.add_argument(
        "--cpu-request", default=None, help="the latency pool's pods' CPU request (default 10m)"
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--many", type=int, default=0, help="suspended sessions (0: skip)")
    parser.add_argument("--workers", type=int, default=8, help="sessions cycled at a time")
    parser.add_argument(
        "--many-within", type=float, default=1200.0, help="seconds to start them in (default 1200)"
    )
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


async def latency(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    async with suspend_bench_on_cluster(
        workdir / "latency",
        pool_size=args.pool,
        recycle=False,
        operator_env={},
        cpu_request=args.cpu_request,
    ) as bench:
        await bench.until_pool_full()
        sizes = [await size_round(bench, size, args.rounds) for size in args.sizes_mb]
        operator = bench.operator
    steps = steps_by_session(operator.log_lines())
    for result in sizes:
        result["operator_steps_ms"] = medians(steps.get(result["session"], {}))
    return {"sizes": sizes, "operator_log": operator.log_summary()}


async def many(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    async with suspend_bench_on_cluster(
        workdir / "many", pool_size=args.workers, recycle=True, operator_env={}
    ) as bench:
        result["pool_fill_s"] = round(await bench.until_pool_full(), 1)
        result["cycle"] = await fleet.suspend_many(
            bench, args.many, args.workers, within_s=args.many_within
        )
        result["holdings"] = await fleet.holdings(bench, "many-")
        result["operator_at_rest"] = await fleet.operator_at_rest(bench)
        result["resume_one"] = await fleet.resume_one(bench, "many-0000")
        result["operator_after"] = await fleet.operator_at_rest(bench)
        result["delete_all"] = await fleet.delete_all(bench, timeout_s=600)
        operator = bench.operator
    result["operator_log"] = operator.log_summary()
    steps = steps_by_session(operator.log_lines())
    merged: dict[str, list[float]] = {}
    for session_steps in steps.values():
        for stage, values in session_steps.items():
            merged.setdefault(stage, []).extend(values)
    result["operator_steps_ms"] = medians(merged)
    return result


async def run(args: argparse.Namespace, workdir: Path, out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "loadavg_before": load_average(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "workdir": str(workdir),
    }
    if not args.skip_latency:
        results["latency"] = await latency(args, workdir)
        text = json.dumps(results, indent=2) + "\n"
        await asyncio.to_thread(out.write_text, text)  # kept if `many` fails
    if args.many:
        results["many"] = await many(args, workdir)
    results["loadavg_after"] = load_average()
    return results


def main() -> None:
    args = parse_args()
    configure_logging(level="WARNING")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out: Path = args.json or RESULTS_DIR / f"suspend-{stamp}.json"
    workdir = RESULTS_DIR / f"suspend-{stamp}"
    workdir.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(run(args, workdir, out))
    text = json.dumps(results, indent=2)
    out.write_text(text + "\n")
    print(text)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
