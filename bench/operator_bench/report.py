"""The bench's results as a console table and as README-ready markdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pair(latency: dict[str, Any] | None) -> str:
    latency = latency or {}
    return f"{_num(latency.get('p50_ms'), 0)} / {_num(latency.get('p99_ms'), 0)}"


def _rate(rate: dict[str, Any] | None) -> str:
    rate = rate or {}
    return f"{_num(rate.get('per_s'))} ({_num(rate.get('steady_per_s'))})"


def _cores(usage: dict[str, float] | None) -> str:
    """CPU cores used, and (+) cores' worth of time spent runnable but waiting for a CPU."""
    usage = usage or {}
    return f"{_num(usage.get('cpu'), 2)} (+{_num(usage.get('runqueue_wait'), 2)})"


def _leftovers(counts: dict[str, int] | None) -> str:
    counts = counts or {}
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def scale_rows(rounds: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in rounds:
        if not str(r.get("round", "")).startswith("scale") or r.get("error"):
            continue
        reclaim = r.get("reclaim") or {}
        cpu = r.get("cpu_cores_create_to_ready") or {}
        rows.append([
            str(r["round"]),
            _num(r.get("create_per_s")),
            _rate(r.get("scheduled_rate")),
            _rate(r.get("ready_rate")),
            _pair(r.get("scheduled_latency")),
            _pair(r.get("ready_latency")),
            str(r.get("failed", "-")),
            f"{_num(r.get('rss_idle_mib'))} -> {_num(r.get('rss_at_ready_mib'))}",
            _num(r.get("rss_per_1000_sessions_mib")),
            _num(reclaim.get("seconds")),
            _leftovers(reclaim.get("leftovers")),
            " / ".join(_cores(cpu.get(p)) for p in ("operator", "kube-apiserver", "etcd")),
            " ".join(_num(x, 2) for x in r.get("loadavg_before") or []),
        ])  # fmt: skip
    return rows


SCALE_HEADER = [
    "round", "create/s", "scheduled/s (steady)", "Ready/s (steady)",
    "create->scheduled p50/p99 ms", "create->Ready p50/p99 ms", "failed",
    "operator RSS idle -> N Ready MiB", "MiB / 1k sessions", "reclaim s", "leftovers",
    "CPU cores (+runqueue wait) operator / apiserver / etcd", "load avg before",
]  # fmt: skip
CLAIM_MODES = ("sequential", "bursts", "cold")
CLAIM_HEADER = [
    "mode", "sessions", "warm hits", "create->Ready p50 ms", "p99 ms",
    "warm only p50 / p99 ms", "failed",
]  # fmt: skip


def claim_rows(rounds: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in rounds:
        if r.get("round") != "claims" or r.get("error"):
            continue
        for mode in CLAIM_MODES:
            part = r.get(mode) or {}
            label = mode if mode != "bursts" else f"bursts of {part.get('burst_size')}"
            every = part.get("all") or {}
            rows.append([
                label,
                str(part.get("sessions", "-")),
                str(part.get("warm_hits", "-")),
                _num(every.get("p50_ms")),
                _num(every.get("p99_ms")),
                _pair(part.get("warm")),
                str(len(part.get("failed") or [])),
            ])  # fmt: skip
    return rows


def _console(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _claim_metrics_lines(rounds: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rounds:
        metrics = r.get("operator_metrics")
        if r.get("round") == "claims" and metrics:
            claim = metrics.get("claim_seconds") or {}
            lines.append(
                f"operator /metrics: pool claims hit {metrics['claims_hit']}, miss "
                f"{metrics['claims_miss']} (hit rate {metrics['hit_rate']}); claim histogram: "
                f"n={claim.get('count')}, mean {claim.get('mean_ms')} ms, p50 "
                f"{claim.get('p50_bucket')}, p99 {claim.get('p99_bucket')}; pool filled "
                f"({r.get('replicas')} warm pods) in {r.get('pool_fill_s')} s"
            )
    return lines


def print_table(rounds: Sequence[dict[str, Any]]) -> None:
    scale, claims = scale_rows(rounds), claim_rows(rounds)
    if scale:
        print(_console(SCALE_HEADER, scale))
    if claims:
        print()
        print(_console(CLAIM_HEADER, claims))
    for line in _claim_metrics_lines(rounds):
        print(line)
    for r in rounds:
        _print_details(r)


def _print_details(r: dict[str, Any]) -> None:
    """Per-round evidence below the tables: stages, CPU cost, calls, profile, memory."""
    if r.get("error"):
        print(f"\n{r['round']}: FAILED: {r['error']}")
    for label, part in [(r["round"], r), *((m, r.get(m) or {}) for m in CLAIM_MODES)]:
        if part.get("stages_p50_ms"):
            stages = ", ".join(f"{k} {_num(v, 0)}" for k, v in part["stages_p50_ms"].items())
            print(f"\n{label}: median ms per stage: {stages}")
    ceiling = r.get("cpu_ceiling")
    if ceiling:
        print(
            f"{r['round']}: CPU per session: operator {ceiling['operator_cpu_ms_per_session']} ms,"
            f" operator + control plane {ceiling['operator_and_control_plane_cpu_ms_per_session']}"
            f" ms -> at most {ceiling['operator_on_one_core_per_s']}/s for the operator on one"
            f" core, {ceiling['all_on_two_cores_per_s']}/s for everything on two cores"
        )
    if r.get("rival_operators"):
        print(f"{r['round']}: other sandfleet operators were running: {r['rival_operators']}")
    for mode, stages in (r.get("operator_side_p50_ms") or {}).items():
        text = ", ".join(f"{k} {_num(v, 0)}" for k, v in stages.items())
        print(f"{mode}: operator log, median ms: {text}")
    _print_calls(r)
    _print_profile(r)
    _print_memory(r)


def _print_calls(r: dict[str, Any]) -> None:
    calls = r.get("api_calls_per_session")
    if not calls:
        return
    print(f"\nAPI calls per session ({r['round']}):")
    for phase, rows in calls.items():
        print(f"  {phase}: {sum(rows.values()):.2f} in all")
        for key, value in rows.items():
            print(f"    {value:6.2f}  {key}")


def _print_profile(r: dict[str, Any]) -> None:
    profile = r.get("profile")
    if not profile or "own_time_by_package" not in profile:
        return
    print(f"\noperator CPU by package ({r['round']}, {profile['total_cpu_s']} s under cProfile):")
    for package, seconds in profile["own_time_by_package"].items():
        print(f"  {seconds:8.2f} s  {package}")
    print("  top functions by own time:")
    for row in profile["top_own_time"][:15]:
        print(f"  {row['own_s']:8.2f} s  {row['calls']:>9}  {row['function']}")


def _print_memory(r: dict[str, Any]) -> None:
    memory = r.get("memory_growth")
    if not memory:
        return
    print(
        f"\noperator memory per 1,000 sessions ({r['round']}, traced): "
        f"{memory['traced_growth_mib_per_1000']} MiB; by package:"
    )
    for package, mib in memory["by_package_mib_per_1000"].items():
        print(f"  {mib:8.1f} MiB  {package}")
    print("  top allocation sites:")
    for line in memory["by_line_mib_per_1000"][:15]:
        each = line["blocks_per_session"]
        print(f"  {line['mib']:8.2f} MiB  {each:6.1f} blocks/session  {line['line']}")


def markdown_table(rounds: Sequence[dict[str, Any]]) -> str:
    parts = []
    scale, claims = scale_rows(rounds), claim_rows(rounds)
    if scale:
        parts.append(_markdown(SCALE_HEADER, scale))
    if claims:
        parts.append(_markdown(CLAIM_HEADER, claims))
    parts += _claim_metrics_lines(rounds)
    return "\n\n".join(parts)
