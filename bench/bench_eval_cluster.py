"""Throughput of the real `sandfleet eval --backend kubernetes` (problems/min) on the local
test cluster, with the real operator and a zero-latency model: the cluster side of bench_eval.

    .venv/bin/python -m bench.bench_eval_cluster                    # 64 problems at 16 and 64
    .venv/bin/python -m bench.bench_eval_cluster -c 16 --json bench-eval-cluster.json
    .venv/bin/python -m bench.bench_eval_cluster --problems 8 -c 4  # a quick smoke run

Needs the local test cluster already running (`python -m tests.cluster.harness.cluster up`, after
`bash tests/cluster/setup.sh` built the images); it is used as it is and left running. The
sandbox image setup.sh last built is imported into the node if it is missing, as the cluster
tests do. The bench makes a fresh sf-bench-eval-* namespace and starts the operator as its
ServiceAccount, serving that namespace only, with its production intervals (as
bench_operator does). Each concurrency level writes bench_eval's folder (same rows, same
reward.py) and runs `.venv/bin/sandfleet eval bench --backend kubernetes -n NS ...` against
the scripted model of bench_batch, served on 127.0.0.1: the operator (on this machine) runs
every loop and calls it; the pods run the tool calls.

Reported per level: bench_eval's throughput rows (problems/min end to end and steady, sample
p50/p99, score, failures), then what was left in the namespace once the eval had exited and
up to --reclaim-wait-s had passed (SandboxSessions, and the operator's pods, Secrets and
NetworkPolicies), how long that took, the peak of live sessions and of model requests in
flight (the operator must keep them within --concurrency), peak RSS of the operator and the
eval process, CPU per problem of the operator and of the cluster's processes, and the
1-minute load average before and after. Other sandfleet operators running meanwhile (the e2e
tests run a cluster-wide one) would reconcile the bench's sessions too: the bench waits up to
--rival-wait-s for them to go and reports any it saw. At the end the namespace is deleted
(the operator still running, so no finalizer waits for it) with a bounded wait.
Ctrl-C stops the eval the way a user's Ctrl-C would, then cleans up the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench.bench_batch import Scratch, run_levels, status_kib, trajectory_responder
from bench.bench_eval import Row, print_table, run_eval, throughput, write_bench
from bench.bench_eval import write_json as write_results
from bench.operator_bench.host import CpuMeter, cluster_pids, load_average, other_operators
from bench.operator_bench.host import rss_mib as process_rss_mib
from bench.operator_bench.launcher import BenchOperator, env_pairs, running_cluster
from bench.operator_bench.namespaces import create_namespace, new_name, strip_finalizers
from sandfleet.api import API_VERSION, SESSION_PLURAL
from sandfleet.kube import KubeClient, KubeConfig, NotFoundError, resource_path
from sandfleet.logs import configure_logging
from tests.cluster.harness import cluster
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import leftovers
from tests.support.scripted_openai import ScriptedOpenAIServer

T = TypeVar("T")
WATCH_INTERVAL_S = 1.0
NAMESPACE_WAIT_S = 120.0
"""How long the final namespace deletion may take before finalizers are stripped."""


@dataclasses.dataclass
class Target:
    """The cluster side of a run: where the sessions go and who serves them."""

    kubeconfig: Path
    kube: KubeClient
    api: KubeApi
    """The tests' client, for operator_harness.leftovers."""
    namespace: str
    operator: BenchOperator

    async def sessions(self) -> list[str]:
        items = await self.kube.list(resource_path(API_VERSION, SESSION_PLURAL, self.namespace))
        return [str(item["metadata"]["name"]) for item in items]

    async def remaining(self) -> list[str]:
        """SandboxSessions, and the operator's pods, Secrets, NetworkPolicies, still there."""
        sessions = [f"sandboxsessions/{name}" for name in await self.sessions()]
        return sessions + await leftovers(self.api, self.namespace)


@dataclasses.dataclass
class Peaks:
    eval_hwm_kib: int = 0
    operator_rss_mib: float = 0.0
    live_sessions: int = 0


async def watch(target: Target, eval_pid: int, peaks: Peaks) -> None:
    """While the eval runs: its memory, the operator's, and the sessions alive at once."""
    while True:
        peaks.eval_hwm_kib = max(peaks.eval_hwm_kib, status_kib(eval_pid, "VmHWM") or 0)
        rss = process_rss_mib(target.operator.pid)
        peaks.operator_rss_mib = max(peaks.operator_rss_mib, rss or 0.0)
        with contextlib.suppress(Exception):  # a slow API server must not end the bench
            peaks.live_sessions = max(peaks.live_sessions, len(await target.sessions()))
        await asyncio.sleep(WATCH_INTERVAL_S)


async def wait_reclaimed(target: Target, timeout_s: float) -> list[str]:
    """What is still in the namespace after the eval, once empty or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = await target.remaining()
        if not remaining or time.monotonic() > deadline:
            return remaining
        await asyncio.sleep(0.5)


def count(objects: Sequence[str], kind: str) -> int:
    return sum(1 for name in objects if name.startswith(f"{kind}/"))


async def run_level(
    scratch: Scratch, target: Target, args: argparse.Namespace, concurrency: int, timeout_s: float
) -> dict[str, Any]:
    work = scratch.root / f"c{concurrency}"
    out = work / "out"
    write_bench(work / "bench", args.problems)
    peaks = Peaks()
    load_before = load_average()
    meter = CpuMeter({"operator": target.operator.pid, **cluster_pids()})
    meter.start()
    # The pods have no output dir until the agent makes one (the local sandboxes do).
    responder = functools.partial(trajectory_responder, make_answer_dir=True)
    async with ScriptedOpenAIServer(responder=responder) as server:
        eval_args = (
            "bench", "--backend", "kubernetes", "--kubeconfig", str(target.kubeconfig),
            "-n", target.namespace, "--model", "bench-model", "--base-url", server.base_url,
            "--max-turns", "10", "--concurrency", str(concurrency), "--out", str(out),
        )  # fmt: skip
        run = await run_eval(
            scratch, work, eval_args, timeout_s, lambda pid: watch(target, pid, peaks)
        )
    result = throughput(args.problems, concurrency, run, out)
    cpu = meter.read(per=max(result["recorded"], 1))
    reclaim_started = time.perf_counter()
    remaining = await wait_reclaimed(target, args.reclaim_wait_s)
    reclaim_s = time.perf_counter() - reclaim_started
    cluster_cpu = sum(v.get("cpu_ms_each", 0.0) for k, v in cpu.items() if k != "operator")
    return {
        **result,
        "chat_requests": len(server.chat_requests),
        "model_in_flight_peak": server.max_in_flight,
        "leftovers": remaining,
        "leftover_sessions": count(remaining, "sandboxsessions"),
        "leftover_pods": count(remaining, "pods"),
        "leftover_secrets": count(remaining, "secrets"),
        "leftover_networkpolicies": count(remaining, "networkpolicies"),
        "reclaim_after_eval_s": round(reclaim_s, 2),
        "peak_live_sessions": peaks.live_sessions,
        "eval_peak_rss_mib": round(peaks.eval_hwm_kib / 1024, 1),
        "operator_peak_rss_mib": round(peaks.operator_rss_mib, 1),
        "operator_cpu_ms_per_problem": (cpu.get("operator") or {}).get("cpu_ms_each"),
        "cluster_cpu_ms_per_problem": round(cluster_cpu, 1),
        "cpu": cpu,
        "rival_operators": other_operators({target.operator.pid}),
        "loadavg_before": load_before,
        "loadavg_after": load_average(),
    }


CLUSTER_ROWS: list[Row] = [
    ("leftover sessions", lambda r: r["leftover_sessions"]),
    ("leftover pods/secrets/netpols", lambda r: f"{r['leftover_pods']}/{r['leftover_secrets']}/"
                                                f"{r['leftover_networkpolicies']}"),
    ("reclaimed after eval s", lambda r: r["reclaim_after_eval_s"]),
    ("peak live sessions (sampled)", lambda r: r["peak_live_sessions"]),
    ("model requests in flight peak", lambda r: r["model_in_flight_peak"]),
    ("operator peak RSS MiB (sampled)", lambda r: r["operator_peak_rss_mib"]),
    ("eval peak RSS MiB", lambda r: r["eval_peak_rss_mib"]),
    ("operator CPU ms/problem", lambda r: r["operator_cpu_ms_per_problem"]),
    ("cluster CPU ms/problem", lambda r: r["cluster_cpu_ms_per_problem"]),
    ("other operators seen", lambda r: len(r["rival_operators"])),
]  # fmt: skip


async def wait_for_rivals(timeout_s: float) -> list[int]:
    """Pids of other sandfleet operators still running after `timeout_s` (empty: none)."""
    deadline = time.monotonic() + timeout_s
    while rivals := other_operators(set()):
        if time.monotonic() > deadline:
            return rivals
        print(f"waiting for other sandfleet operators to stop: {rivals}", flush=True)
        await asyncio.sleep(5)
    return []


async def namespace_gone(kube: KubeClient, namespace: str, timeout_s: float) -> bool:
    path = resource_path("v1", "namespaces", name=namespace)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            await kube.get(path)
        except NotFoundError:
            return True
        await asyncio.sleep(1)
    return False


async def remove_namespace(kube: KubeClient, namespace: str, operator: BenchOperator) -> bool:
    """Delete the namespace while the operator still runs (its finalizers are on the
    sessions); past NAMESPACE_WAIT_S, stop it and strip them. True once it is gone."""
    try:
        with contextlib.suppress(NotFoundError):
            await kube.delete(resource_path("v1", "namespaces", name=namespace))
        if await namespace_gone(kube, namespace, NAMESPACE_WAIT_S):
            return True
        await asyncio.to_thread(operator.stop)
        await strip_finalizers(kube, namespace)
        return await namespace_gone(kube, namespace, 30)
    finally:
        await asyncio.to_thread(operator.stop)


async def uninterrupted(work: Awaitable[T]) -> T:
    """Run `work` to its end even through Ctrl-C: cleanup must not stop half way."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            print("still cleaning up (the namespace) ...", file=sys.stderr, flush=True)


async def bench(args: argparse.Namespace, scratch: Scratch) -> dict[str, Any]:
    layout, kubeconfig, images = running_cluster()
    await asyncio.to_thread(cluster.import_missing_images, layout)
    rivals_at_start = await wait_for_rivals(args.rival_wait_s)
    namespace = new_name("eval")
    operator_dir = scratch.root / "operator"
    operator_dir.mkdir(parents=True)
    operator = BenchOperator(
        kubeconfig, images["runtime"].ref, operator_dir,
        namespaces=[namespace], env=env_pairs(args.operator_env),
    )  # fmt: skip
    config = await asyncio.to_thread(KubeConfig.load, kubeconfig)
    runs: list[dict[str, Any]] = []
    async with KubeClient(config, qps=1000, burst=1000, timeout_s=60) as kube:
        await create_namespace(kube, namespace)
        removed = False
        try:
            await asyncio.to_thread(operator.start)
            target = Target(
                kubeconfig, kube, KubeApi.from_kubeconfig(kubeconfig), namespace, operator
            )

            async def level(concurrency: int, remaining: float) -> dict[str, Any]:
                return await run_level(scratch, target, args, concurrency, remaining)

            runs = await run_levels(
                args.concurrency, f"{args.problems} problems", args.budget_s, scratch, level
            )
        finally:
            removed = await uninterrupted(remove_namespace(kube, namespace, operator))
    return {
        "namespace": namespace,
        "namespace_deleted": removed,
        "rivals_at_start": rivals_at_start,
        "operator_log": str(operator.log_path),
        "operator_log_summary": operator.log_summary(),
        "runs": runs,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", "-n", type=int, default=64)
    parser.add_argument("--concurrency", "-c", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--budget-s", type=float, default=900.0, help="for all levels together")
    parser.add_argument(
        "--reclaim-wait-s", type=float, default=60.0,
        help="after each eval, how long to wait for the namespace to empty (default: 60)",
    )  # fmt: skip
    parser.add_argument(
        "--rival-wait-s", type=float, default=120.0,
        help="how long to wait for other sandfleet operators to stop first (default: 120)",
    )  # fmt: skip
    parser.add_argument(
        "--operator-env", action="append", default=[], metavar="KEY=VALUE",
        help="more operator environment (repeatable), e.g. SANDFLEET_OPERATOR_KUBE_QPS=500",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, results)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    return parser.parse_args()


def is_clean(run: dict[str, Any]) -> bool:
    return bool(
        run["exit_code"] == 0 and not run["failures"] and not run["leftovers"]
        and not run["rival_operators"]
    )  # fmt: skip


def main() -> int:
    args = parse_args()
    env_pairs(args.operator_env)  # a malformed one stops the bench before it touches anything
    configure_logging(level="WARNING")
    scratch = Scratch(Path(tempfile.mkdtemp(prefix="sandfleet-bench-eval-cluster-")), args.keep)
    results: dict[str, Any] = {}
    try:
        results = asyncio.run(bench(args, scratch))
    except KeyboardInterrupt:
        scratch.interrupted = True
    finally:
        scratch.reclaim()
    runs: list[dict[str, Any]] = results.get("runs", [])
    if runs:
        print_table(runs, CLUSTER_ROWS)
    if results and not results["namespace_deleted"]:
        print(f"namespace {results['namespace']} was not gone in time", file=sys.stderr)
    if args.json:
        write_results(args.json, runs, **{k: v for k, v in results.items() if k != "runs"})
    if scratch.interrupted:
        return 130
    return 0 if runs and results["namespace_deleted"] and all(map(is_clean, runs)) else 1


if __name__ == "__main__":
    sys.exit(main())
