"""The kopf operator against the real test cluster: scale on kwok, warm claims on the real node.

    .venv/bin/python -m bench.bench_operator                          # scale 1k + 5k, claims
    .venv/bin/python -m bench.bench_operator --rounds scale --sessions 1000
    .venv/bin/python -m bench.bench_operator --rounds claims --sequential 50
    .venv/bin/python -m bench.bench_operator --rounds calls profile   # where the time goes

Rounds (each in a fresh sf-bench-* namespace, with an operator of its own serving only it,
started like tests/cluster/harness/operator_harness.py does: CRDs, RBAC, its ServiceAccount token):
  scale    N raw SandboxSessions (no env/files: Ready comes from the pod, which kwok fakes)
           from a SandboxTemplate that targets kwok fake nodes, created with many requests
           in flight. Client-side watch stamps: sessions/s to pod scheduled (spec.nodeName)
           and to Ready; operator RSS idle / at N Ready (per 1,000 sessions); CPU of the
           operator and the control plane; then one deletecollection and the time until no
           session, pod, Secret or NetworkPolicy is left (and a listing of what is).
  claims   a SandboxPool of real runtime pods on the real node; sessions with poolRef one at
           a time and in bursts, create -> Ready p50/p99 (warm hits and cold fallbacks), the
           pool hit rate and claim histogram from the operator's /metrics; cold starts
           (no poolRef) for comparison.
  calls    a scale round through a loopback proxy that counts the operator's API calls per
           session (kopf's and sandfleet's own client), by verb and resource.
  profile  a scale round with the operator under cProfile: own time by package/function.
  memory   a scale round with the operator under tracemalloc: memory per 1,000 sessions by
           package and source line (snapshots idle and at N Ready).

Results: a table and a README-ready markdown table on stdout, everything as JSON in
~/.cache/sandfleet/bench/operator-<time>.json (or --out), operator logs and profiles next to
it. Other sandfleet operators (the e2e tests run a cluster-wide one) would reconcile the
bench's sessions too: each round waits for them to go (--rival-wait) and records any it saw.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import traceback
from pathlib import Path
from typing import Any

from bench.operator_bench.bench_context import BenchContext
from bench.operator_bench.claims import claims_round
from bench.operator_bench.kwok import create_fake_nodes, delete_fake_nodes, nodes_for
from bench.operator_bench.launcher import env_pairs, running_cluster
from bench.operator_bench.namespaces import leftover_namespaces
from bench.operator_bench.report import markdown_table, print_table
from bench.operator_bench.scale import ScaleOptions, scale_round
from sandfleet.kube import KubeClient, KubeConfig
from sandfleet.logs import configure_logging
from tests.cluster.harness import cluster
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import install_api

RESULTS_DIR = Path.home() / ".cache" / "sandfleet" / "bench"
ROUNDS = ("scale", "claims", "calls", "profile", "memory")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", nargs="+", choices=ROUNDS, default=["scale", "claims"])
    parser.add_argument(
        "--sessions",
        type=int,
        nargs="+",
        default=[1000, 5000],
        help="scale rounds, one per count (default: 1000 5000)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=300, help="create requests in flight (default: 300)"
    )
    parser.add_argument(
        "--kube-qps",
        type=float,
        default=500.0,
        help="the operator's SANDFLEET_OPERATOR_KUBE_QPS (default: 500)",
    )
    parser.add_argument(
        "--kube-burst",
        type=int,
        default=1000,
        help="the operator's SANDFLEET_OPERATOR_KUBE_BURST (default: 1000)",
    )
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more operator environment (repeatable), e.g. SANDFLEET_LOG_LEVEL=WARNING",
    )
    parser.add_argument("--pool-replicas", type=int, default=20)
    parser.add_argument("--sequential", type=int, default=100, help="one-at-a-time claims")
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--burst-size", type=int, default=20)
    parser.add_argument("--cold", type=int, default=20, help="cold starts (no poolRef)")
    parser.add_argument("--calls-sessions", type=int, default=300)
    parser.add_argument("--profile-sessions", type=int, default=1000)
    parser.add_argument("--memory-sessions", type=int, default=1000)
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="bound of each wait for sessions, in seconds (default: 900)",
    )
    parser.add_argument(
        "--rival-wait",
        type=float,
        default=300.0,
        help="seconds to wait for other sandfleet operators to stop (default: 300)",
    )
    parser.add_argument(
        "--out", type=Path, help=f"the JSON results (default: a new file in {RESULTS_DIR})"
    )
    return parser.parse_args()


def operator_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "SANDFLEET_OPERATOR_KUBE_QPS": str(args.kube_qps),
        "SANDFLEET_OPERATOR_KUBE_BURST": str(args.kube_burst),
        **env_pairs(args.operator_env),
    }


async def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    layout, kubeconfig, images = running_cluster()
    if "claims" in args.rounds:
        await asyncio.to_thread(cluster.import_missing_images, layout)
    # The CRDs before any round creates a template (a cluster may just have been restarted).
    await asyncio.to_thread(install_api, KubeApi.from_kubeconfig(kubeconfig))
    workdir = out.with_suffix("")
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "operator_env": operator_env(args),
        "workdir": str(workdir),
        "rounds": [],
    }
    config = KubeConfig.load(kubeconfig)
    async with KubeClient(
        config, qps=10_000, burst=10_000, timeout_s=120, connection_limit=args.concurrency + 50
    ) as kube:
        ctx = BenchContext(
            kube=kube,
            admin_kubeconfig=kubeconfig,
            runtime_image=images["runtime"].ref,
            workdir=workdir,
            operator_env=operator_env(args),
            rival_wait_s=args.rival_wait,
            timeout_s=args.timeout,
        )
        plan = round_plan(args)
        scale_sizes = [o.sessions for o in plan if isinstance(o, ScaleOptions)]
        try:
            if scale_sizes:
                nodes = [f"sf-bench-kwok-{i}" for i in range(nodes_for(max(scale_sizes)))]
                await create_fake_nodes(kube, nodes)
            for options in plan:
                try:
                    results["rounds"].append(await _run_round(ctx, args, options))
                except Exception as exc:  # noqa: BLE001 - report it, run the other rounds
                    traceback.print_exc()
                    name = options.name if isinstance(options, ScaleOptions) else options
                    results["rounds"].append({"round": name, "error": repr(exc)})
                # Partial results survive a later round's failure (or Ctrl-C).
                await asyncio.to_thread(out.write_text, json.dumps(results, indent=2) + "\n")
        finally:
            if scale_sizes:
                results["fake_nodes_deleted"] = await delete_fake_nodes(kube)
            results["leftover_namespaces"] = await leftover_namespaces(kube)
    return results


def round_plan(args: argparse.Namespace) -> list[ScaleOptions | str]:
    """The rounds in the order asked: a scale round's options, or "claims"."""
    plan: list[ScaleOptions | str] = []
    for name in args.rounds:
        if name == "scale":
            plan += [ScaleOptions(n, args.concurrency) for n in args.sessions]
        elif name == "calls":
            plan.append(ScaleOptions(args.calls_sessions, args.concurrency, count_calls=True))
        elif name == "profile":
            plan.append(ScaleOptions(args.profile_sessions, args.concurrency, profile=True))
        elif name == "memory":
            plan.append(ScaleOptions(args.memory_sessions, args.concurrency, trace_memory=True))
        else:
            plan.append(name)
    return plan


async def _run_round(
    ctx: BenchContext, args: argparse.Namespace, options: ScaleOptions | str
) -> dict[str, Any]:
    if isinstance(options, ScaleOptions):
        return await scale_round(ctx, options)
    return await claims_round(
        ctx,
        replicas=args.pool_replicas,
        sequential=args.sequential,
        bursts=args.bursts,
        burst_size=args.burst_size,
        cold=args.cold,
    )


def main() -> int:
    args = parse_args()
    configure_logging(level="WARNING")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out: Path = args.out or RESULTS_DIR / f"operator-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(run(args, out))
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results["rounds"])
    print()
    print(markdown_table(results["rounds"]))
    print(f"\nresults: {out}")
    return 0 if all(_clean(r) for r in results["rounds"]) else 1


def _clean(result: dict[str, Any]) -> bool:
    """No failed session, nothing left over, no other operator in the way."""
    leftovers = result.get("leftovers") or (result.get("reclaim") or {}).get("leftovers") or {}
    return (
        not result.get("failed")
        and not any(leftovers.values())
        and not result.get("rival_operators")
    )


if __name__ == "__main__":
    raise SystemExit(main())
