"""OperatorMetrics: its own registry, closed label sets, and what each call-site method counts."""

from __future__ import annotations

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandfleet.api import Phase, ReclaimReason
from sandfleet.operator.metrics import CLAIM_BUCKETS, START_BUCKETS, OperatorMetrics


@pytest.fixture
def metrics() -> OperatorMetrics:
    return OperatorMetrics()


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_two_instances_count_separately_and_never_in_the_global_registry() -> None:
    first, second = OperatorMetrics(), OperatorMetrics()

    first.claimed(hit=True, seconds=0.01)

    assert sample(first, "sandfleet_pool_claims_total", result="hit") == 1
    assert sample(second, "sandfleet_pool_claims_total", result="hit") == 0
    assert prometheus_client.REGISTRY.get_sample_value("sandfleet_pool_claims_total") is None


def test_every_series_of_a_closed_label_set_exists_at_zero_from_the_start(
    metrics: OperatorMetrics,
) -> None:
    for phase in Phase:
        assert sample(metrics, "sandfleet_sessions", phase=phase.value) == 0
    for result in ("hit", "miss"):
        assert sample(metrics, "sandfleet_pool_claims_total", result=result) == 0
    for reason in ReclaimReason:
        assert sample(metrics, "sandfleet_reclaims_total", reason=reason.value) == 0
    for source in ("cold", "warm"):
        assert sample(metrics, "sandfleet_session_start_seconds_count", source=source) == 0
    for kind in ("prompt", "completion"):
        assert sample(metrics, "sandfleet_agent_tokens_total", kind=kind) == 0


def test_sessions_move_between_phases(metrics: OperatorMetrics) -> None:
    metrics.session_phase_changed(None, Phase.PENDING)
    metrics.session_phase_changed(None, Phase.PENDING)
    metrics.session_phase_changed(Phase.PENDING, Phase.READY)
    metrics.session_phase_changed(None, None)  # a session with no phase yet, seen and gone

    assert sample(metrics, "sandfleet_sessions", phase="Pending") == 1
    assert sample(metrics, "sandfleet_sessions", phase="Ready") == 1
    assert metrics.sessions_in(Phase.READY) == 1

    metrics.session_phase_changed(Phase.READY, None)

    assert sample(metrics, "sandfleet_sessions", phase="Ready") == 0


def test_the_session_gauge_never_goes_below_zero(metrics: OperatorMetrics) -> None:
    metrics.session_phase_changed(Phase.RUNNING, Phase.SUCCEEDED)  # RUNNING was never counted

    assert sample(metrics, "sandfleet_sessions", phase="Running") == 0
    assert sample(metrics, "sandfleet_sessions", phase="Succeeded") == 1


def test_start_times_are_observed_by_source(metrics: OperatorMetrics) -> None:
    metrics.session_ready(warm=True, seconds=0.04)
    metrics.session_ready(warm=False, seconds=3.5)
    metrics.session_ready(warm=False, seconds=2.5)

    assert sample(metrics, "sandfleet_session_start_seconds_count", source="warm") == 1
    assert sample(metrics, "sandfleet_session_start_seconds_count", source="cold") == 2
    assert sample(metrics, "sandfleet_session_start_seconds_sum", source="cold") == 6.0
    assert sample(metrics, "sandfleet_session_start_seconds_bucket", source="warm", le="0.05") == 1


def test_claims_count_hits_and_misses_and_time_the_hits(metrics: OperatorMetrics) -> None:
    metrics.claimed(hit=True, seconds=0.03)
    metrics.claimed(hit=True, seconds=0.2)
    metrics.claimed(hit=False, seconds=0.001)

    hits = sample(metrics, "sandfleet_pool_claims_total", result="hit")
    misses = sample(metrics, "sandfleet_pool_claims_total", result="miss")
    assert (hits, misses) == (2, 1)
    assert sample(metrics, "sandfleet_pool_claim_seconds_count") == 2
    assert sample(metrics, "sandfleet_pool_claim_seconds_bucket", le="0.05") == 1


def test_tool_calls_are_timed_per_tool_and_unknown_tools_count_as_other(
    metrics: OperatorMetrics,
) -> None:
    metrics.tool_called("execute_bash", 1.5)
    metrics.tool_called("made_up_by_the_model", 0.001)
    metrics.tool_called("another_invention", 0.001)

    assert sample(metrics, "sandfleet_tool_call_seconds_count", tool="execute_bash") == 1
    assert sample(metrics, "sandfleet_tool_call_seconds_count", tool="other") == 2
    assert sample(metrics, "sandfleet_tool_call_seconds_count", tool="made_up_by_the_model") is None


def test_agent_turns_runs_and_tokens_are_counted(metrics: OperatorMetrics) -> None:
    for _ in range(3):
        metrics.agent_turn()
    metrics.agent_finished("submitted", 1200, 300)
    metrics.agent_finished("max_turns", 50, 5)
    metrics.agent_finished("a-reason-from-the-future")
    metrics.agent_finished("submitted", -5, -5)  # never decreases a counter

    assert sample(metrics, "sandfleet_agent_turns_total") == 3
    assert sample(metrics, "sandfleet_agent_runs_total", stop_reason="submitted") == 2
    assert sample(metrics, "sandfleet_agent_runs_total", stop_reason="max_turns") == 1
    assert sample(metrics, "sandfleet_agent_runs_total", stop_reason="other") == 1
    assert sample(metrics, "sandfleet_agent_tokens_total", kind="prompt") == 1250
    assert sample(metrics, "sandfleet_agent_tokens_total", kind="completion") == 305


def test_reclaims_are_counted_by_reason(metrics: OperatorMetrics) -> None:
    metrics.reclaimed(ReclaimReason.IDLE)
    metrics.reclaimed(ReclaimReason.IDLE)
    metrics.reclaimed(ReclaimReason.TTL)

    assert sample(metrics, "sandfleet_reclaims_total", reason="idle") == 2
    assert sample(metrics, "sandfleet_reclaims_total", reason="ttl") == 1


def test_a_pools_idle_gauge_is_set_and_dropped_with_the_pool(metrics: OperatorMetrics) -> None:
    metrics.pool_idle("team-a", "swe", 4)
    metrics.pool_idle("team-b", "swe", 1)
    metrics.pool_idle("team-a", "swe", 3)

    assert sample(metrics, "sandfleet_pool_idle_sandboxes", namespace="team-a", pool="swe") == 3

    metrics.pool_gone("team-a", "swe")
    metrics.pool_gone("team-a", "never-seen")

    assert sample(metrics, "sandfleet_pool_idle_sandboxes", namespace="team-a", pool="swe") is None
    assert sample(metrics, "sandfleet_pool_idle_sandboxes", namespace="team-b", pool="swe") == 1


def test_render_gives_prometheus_text_that_parses(metrics: OperatorMetrics) -> None:
    metrics.claimed(hit=True, seconds=0.02)

    body, content_type = metrics.render()

    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert {
        "sandfleet_sessions",
        "sandfleet_session_start_seconds",
        "sandfleet_pool_claim_seconds",
        "sandfleet_pool_claims",
        "sandfleet_tool_call_seconds",
        "sandfleet_agent_turns",
        "sandfleet_agent_tokens",
        "sandfleet_agent_runs",
        "sandfleet_reclaims",
    } <= set(families)
    assert families["sandfleet_pool_claims"].type == "counter"


def test_render_speaks_openmetrics_when_the_scraper_asks(metrics: OperatorMetrics) -> None:
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")

    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_the_buckets_span_the_latency_targets() -> None:
    assert (CLAIM_BUCKETS[0], CLAIM_BUCKETS[-1]) == (0.005, 5.0)
    assert (START_BUCKETS[0], START_BUCKETS[-1]) == (0.05, 120.0)
    # Warm claim to Ready targets: p50 50 ms, p99 250 ms (issue #5): both are bucket edges.
    assert {0.05, 0.25} <= set(CLAIM_BUCKETS) & set(START_BUCKETS)
    assert list(CLAIM_BUCKETS) == sorted(CLAIM_BUCKETS)
    assert list(START_BUCKETS) == sorted(START_BUCKETS)


def test_suspended_sessions_and_their_bytes_count_per_namespace_while_held(
    metrics: OperatorMetrics,
) -> None:
    metrics.snapshot_held("team-a", 1000, held=True)
    metrics.snapshot_held("team-a", 500, held=True)
    metrics.snapshot_held("team-b", 7, held=True)
    metrics.snapshot_held("team-a", 1000, held=False)  # resumed
    assert sample(metrics, "sandfleet_suspended_sessions", namespace="team-a") == 1
    assert sample(metrics, "sandfleet_snapshot_bytes", namespace="team-a") == 500
    assert sample(metrics, "sandfleet_snapshot_bytes", namespace="team-b") == 7


def test_suspend_and_resume_are_timed_and_failures_counted_by_closed_reasons(
    metrics: OperatorMetrics,
) -> None:
    name = "sandfleet_suspend_failures_total"
    assert sample(metrics, name, step="resume", reason="corrupt") == 0  # exists from the start
    metrics.transition("resume", 0.12)
    metrics.transition_failed("suspend", "store_unavailable")
    metrics.transition_failed("suspend", "a reason nobody listed")
    count = "sandfleet_suspend_transition_seconds_count"
    assert sample(metrics, count, step="resume") == 1
    assert (
        sample(metrics, "sandfleet_suspend_transition_seconds_bucket", step="resume", le="0.15")
        == 1
    )
    assert sample(metrics, name, step="suspend", reason="store_unavailable") == 1
    assert sample(metrics, name, step="suspend", reason="other") == 1
