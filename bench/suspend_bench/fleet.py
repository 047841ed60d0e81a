"""Many suspended sessions: what they hold and cost, and whether the operator still serves.

`count` sessions go through the real cycle, `workers` at a time (the pool's size): created
on the warm pool, Ready, `spec.suspend: true`, Suspended with the pod given back. Then,
with all of them suspended: the pods, Secrets and NetworkPolicies they hold (none), the API
objects left per session (the SandboxSession, plus its Events until their TTL), the size of
a SandboxSession as the API serves it (JSON, which is what etcd stores for a custom
resource), the bytes on the snapshot volume, the operator's RSS and CPU at rest; and one of
them resumed (latency, a command answered) while the others stay suspended."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.operator_bench.host import load_average, rss_mib, schedstat
from bench.operator_bench.stats import latency_ms
from bench.suspend_bench.on_cluster import POOL, SuspendBench
from bench.suspend_bench.session_watch import phase, ready, released
from sandfleet.api import Label
from sandfleet.kube import resource_path

REST_S = 20.0
"""How long the operator's CPU is measured with every session suspended."""


async def _cycle(bench: SuspendBench, name: str, took: list[float], failed: list[str]) -> None:
    watch = bench.watch
    started = time.monotonic()
    await bench.create(name, {"poolRef": {"name": POOL}})
    _, body = await watch.until(name, ready, timeout_s=600)
    if phase(body) != "Ready":
        failed.append(f"{name}: {body.get('status')}")
        return
    mark = watch.mark(name)
    await bench.set_suspend(name, True)
    _, body = await watch.until(name, released, since=mark, timeout_s=600)
    if phase(body) != "Suspended":
        failed.append(f"{name}: {body.get('status')}")
        return
    took.append(time.monotonic() - started)
    watch.forget(name)


async def suspend_many(
    bench: SuspendBench, count: int, workers: int, *, within_s: float
) -> dict[str, Any]:
    """`count` sessions cycled to Suspended, `workers` at a time; no new one is started after
    `within_s` (the cluster is shared: the round reports how many it got to)."""
    names = iter(f"many-{i:04d}" for i in range(count))
    took: list[float] = []
    failed: list[str] = []
    stop_at = time.monotonic() + within_s

    async def worker() -> None:
        for name in names:
            if time.monotonic() > stop_at:
                return
            await _cycle(bench, name, took, failed)

    load_before, started = load_average(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = time.monotonic() - started
    return {
        "sessions": count,
        "workers": workers,
        "suspended": len(took),
        "failed": failed[:5],
        "failed_count": len(failed),
        "elapsed_s": round(elapsed, 1),
        "per_s": round(len(took) / elapsed, 2),
        "create_to_released": latency_ms(took),
        "loadavg_before": load_before,
        "loadavg_after": load_average(),
    }


async def holdings(bench: SuspendBench, prefix: str) -> dict[str, Any]:
    """What the suspended sessions hold on the API server and the snapshot volume."""
    kube, ns = bench.kube, bench.namespace
    sessions = [
        s for s in await kube.list(bench.path()) if s["metadata"]["name"].startswith(prefix)
    ]
    pods = await kube.list(resource_path("v1", "pods", ns), label_selector=Label.SESSION)
    held_pods = [p for p in pods if p["metadata"]["labels"][Label.SESSION].startswith(prefix)]
    secrets = await kube.list(resource_path("v1", "secrets", ns), label_selector=Label.SESSION)
    policies = await kube.list(
        resource_path("networking.k8s.io/v1", "networkpolicies", ns), label_selector=Label.SESSION
    )
    events = await kube.list(resource_path("v1", "events", ns))
    session_events = [
        e for e in events
        if e["involvedObject"].get("kind") == "SandboxSession"
        and e["involvedObject"].get("name", "").startswith(prefix)
    ]  # fmt: skip
    sizes = [len(json.dumps(s, separators=(",", ":"))) for s in sessions]
    no_managed = [
        len(json.dumps({**s, "metadata": {k: v for k, v in s["metadata"].items()
                                          if k != "managedFields"}}, separators=(",", ":")))
        for s in sessions
    ]  # fmt: skip
    snapshot_bytes = await asyncio.to_thread(_archive_sizes, bench.store_dir / ns, prefix)
    suspended = [s for s in sessions if phase(s) == "Suspended"]
    return {
        "sessions": len(sessions),
        "suspended": len(suspended),
        "pods_held": len(held_pods),
        "secrets_held": len(
            [s for s in secrets if s["metadata"]["labels"][Label.SESSION].startswith(prefix)]
        ),
        "network_policies_held": len(
            [p for p in policies if p["metadata"]["labels"][Label.SESSION].startswith(prefix)]
        ),
        "pods_in_namespace": len(await kube.list(resource_path("v1", "pods", ns))),
        "events_per_session": round(len(session_events) / max(len(sessions), 1), 2),
        "event_bytes_each": round(
            sum(len(json.dumps(e, separators=(",", ":"))) for e in session_events)
            / max(len(session_events), 1)
        ),
        "session_json_bytes": _spread(sizes),
        "session_json_bytes_without_managed_fields": _spread(no_managed),
        "snapshot_files": len(snapshot_bytes),
        "snapshot_bytes": _spread(snapshot_bytes),
        "snapshot_bytes_total": sum(snapshot_bytes),
    }


def _archive_sizes(folder: Path, prefix: str) -> list[int]:
    return [p.stat().st_size for p in folder.glob(f"{prefix}*/*.tar")]


def _spread(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"min": ordered[0], "median": ordered[len(ordered) // 2], "max": ordered[-1],
            "mean": round(sum(values) / len(values), 1)}  # fmt: skip


async def operator_at_rest(bench: SuspendBench) -> dict[str, Any]:
    """The operator's RSS and CPU (cores) over REST_S with every session suspended."""
    pid = bench.operator.pid
    before, started = schedstat(pid), time.monotonic()
    await asyncio.sleep(REST_S)
    after, wall = schedstat(pid), time.monotonic() - started
    cpu = None if before is None or after is None else round((after[0] - before[0]) / wall, 3)
    return {"rss_mib": rss_mib(pid), "cpu_cores": cpu, "over_s": REST_S}


async def resume_one(bench: SuspendBench, name: str) -> dict[str, Any]:
    """One of the suspended sessions resumed while the rest stay suspended: latency, warm or
    not, and a command answered in it."""
    await bench.until_pool_full()
    watch = bench.watch
    mark, started = watch.mark(name), time.monotonic()
    await bench.set_suspend(name, False)
    stamp, body = await watch.until(name, ready, since=mark)
    resumed_s = stamp - started
    client = await bench.runtime(body)
    try:
        answer = (await client.run_command("echo answered; pwd")).stdout.split()
    finally:
        await client.close()
    return {
        "session": name,
        "phase": phase(body),
        "resume_ms": round(resumed_s * 1000, 1),
        "warm": (body["status"].get("poolName") or "") == POOL,
        "command": answer,
    }


async def delete_all(bench: SuspendBench, timeout_s: float) -> dict[str, Any]:
    """Every session deleted at once: the operator drops each snapshot with its session."""
    started = time.monotonic()
    await bench.kube.delete(bench.path())
    while sessions := await bench.kube.list(bench.path()):
        if time.monotonic() - started > timeout_s:
            break
        await asyncio.sleep(1.0)
    left = await asyncio.to_thread(_archive_sizes, bench.store_dir / bench.namespace, "")
    return {"seconds": round(time.monotonic() - started, 1), "sessions_left": len(sessions),
            "snapshots_left": len(left)}  # fmt: skip
