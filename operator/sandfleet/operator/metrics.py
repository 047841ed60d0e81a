"""The operator's Prometheus metrics, in a registry of their own, with call-site-shaped methods.

A private CollectorRegistry (never prometheus_client's global one) lets tests, and two
operators in one process, each count on their own. Every label takes values from a closed
set (phases, tool names, stop reasons, reclaim reasons); anything else is counted as
"other", so a model inventing tool names cannot grow the series without bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from sandfleet.agent.results import StopReason
from sandfleet.api import Phase, ReclaimReason
from sandfleet.tool_calls import EXECUTE_BASH, STR_REPLACE_EDITOR, SUBMIT

OTHER: Final = "other"
"""The label value for a tool name or stop reason outside the known set."""

# Claiming a warm pod is one list from the local cache plus one patch: milliseconds when
# healthy, seconds only when the API server is overloaded. The warm targets (p50 50 ms,
# p99 250 ms) are bucket edges here and in START_BUCKETS, so they read off exactly.
CLAIM_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Create -> Ready: ~50 ms for a warm claim and bind, seconds for a cold pod on a warm node,
# up to minutes when the image must be pulled or the cluster must scale out.
START_BUCKETS: Final = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# A tool call: an editor view takes milliseconds, a test suite minutes (tool timeouts go to
# 120 s by default, longer when a session asks).
TOOL_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
)  # fmt: skip

# Suspend and resume: a few hundred ms for a small tree on a warm pool, seconds for a cold
# pod or a big tree (the goal for a 10 MB resume from a warm pool is 150 ms).
SUSPEND_BUCKETS: Final = (
    0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
SUSPEND_FAILURES: Final = (
    "store_unavailable", "too_large", "runtime", "not_supported", "corrupt", "pod",
)  # fmt: skip
"""Why a suspend or resume failed (the failures metric's reason label)."""

_TOOLS: Final = (EXECUTE_BASH, STR_REPLACE_EDITOR, SUBMIT)
_TOKEN_KINDS: Final = ("prompt", "completion")


class OperatorMetrics:
    """All the operator's metrics; `render()` gives the /metrics response."""

    def __init__(self, tools: Iterable[str] = _TOOLS) -> None:
        self.registry = CollectorRegistry()
        self._tools = frozenset(tools)
        self._stop_reasons = frozenset(r.value for r in StopReason)
        self._phase_counts = dict.fromkeys(Phase, 0)
        reg = self.registry
        self._sessions = Gauge(
            "sandfleet_sessions",
            "SandboxSessions this operator serves, by status.phase.",
            ["phase"],
            registry=reg,
        )
        self._start = Histogram(
            "sandfleet_session_start_seconds",
            "From a session's creation to Ready; source: cold (own pod) or warm (pool claim).",
            ["source"],
            buckets=START_BUCKETS,
            registry=reg,
        )
        self._claim = Histogram(
            "sandfleet_pool_claim_seconds",
            "Time to claim an idle warm pod for a session (successful claims only).",
            buckets=CLAIM_BUCKETS,
            registry=reg,
        )
        self._claims = Counter(
            "sandfleet_pool_claims",
            "Claim attempts on a pool: hit (got a warm pod) or miss (none idle: cold start).",
            ["result"],
            registry=reg,
        )
        self._tool_calls = Histogram(
            "sandfleet_tool_call_seconds",
            "Duration of the agent's tool calls in the sandbox, by tool.",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=reg,
        )
        self._turns = Counter(
            "sandfleet_agent_turns", "Agent turns (model calls) started.", registry=reg
        )
        self._tokens = Counter(
            "sandfleet_agent_tokens",
            "Model tokens used by finished agent runs, by kind (prompt, completion).",
            ["kind"],
            registry=reg,
        )
        self._runs = Counter(
            "sandfleet_agent_runs",
            "Finished agent runs, by stop reason.",
            ["stop_reason"],
            registry=reg,
        )
        self._reclaims = Counter(
            "sandfleet_reclaims",
            "Sandboxes taken away, by reason (completed, ttl, idle, deadline, ...).",
            ["reason"],
            registry=reg,
        )
        self._pool_idle = Gauge(
            "sandfleet_pool_idle_sandboxes",
            "Idle, ready warm pods per pool.",
            ["namespace", "pool"],
            registry=reg,
        )
        self._suspend_metrics(reg)
        # Every series of a closed label set exists from the start at 0, so rates and the hit
        # ratio are defined before the first event instead of missing.
        for phase in Phase:
            self._sessions.labels(phase=phase.value).set(0)
        for source in ("cold", "warm"):
            self._start.labels(source=source)
        for result in ("hit", "miss"):
            self._claims.labels(result=result)
        for tool in (*sorted(self._tools), OTHER):
            self._tool_calls.labels(tool=tool)
        for kind in _TOKEN_KINDS:
            self._tokens.labels(kind=kind)
        for stop in (*sorted(self._stop_reasons), OTHER):
            self._runs.labels(stop_reason=stop)
        for reason in ReclaimReason:
            self._reclaims.labels(reason=reason.value)

    # --- sessions ----------------------------------------------------------------------
    def session_phase_changed(self, old: Phase | None, new: Phase | None) -> None:
        """A session moved from `old` to `new`: None is "not counted" (new to this process,
        or gone from it). The gauge never goes below zero, even for an unseen `old`."""
        if old == new:
            return
        if old is not None and self._phase_counts[old] > 0:
            self._phase_counts[old] -= 1
            self._sessions.labels(phase=old.value).set(self._phase_counts[old])
        if new is not None:
            self._phase_counts[new] += 1
            self._sessions.labels(phase=new.value).set(self._phase_counts[new])

    def sessions_in(self, phase: Phase) -> int:
        return self._phase_counts[phase]

    def session_ready(self, *, warm: bool, seconds: float) -> None:
        """A session became Ready `seconds` after its creation (warm: from a pool claim)."""
        self._start.labels(source="warm" if warm else "cold").observe(seconds)

    # --- pools -------------------------------------------------------------------------
    def claimed(self, *, hit: bool, seconds: float) -> None:
        """One claim attempt on a pool. The duration is recorded for hits only: a miss is
        followed by a cold start, which session_ready times."""
        self._claims.labels(result="hit" if hit else "miss").inc()
        if hit:
            self._claim.observe(seconds)

    def pool_idle(self, namespace: str, pool: str, count: int) -> None:
        """The pool now has `count` idle, ready pods."""
        self._pool_idle.labels(namespace=namespace, pool=pool).set(count)

    def pool_gone(self, namespace: str, pool: str) -> None:
        """The pool was deleted: drop its series instead of reporting a stale count forever."""
        with contextlib.suppress(KeyError):  # never reported: nothing to drop
            self._pool_idle.remove(namespace, pool)

    def reclaimed(self, reason: ReclaimReason) -> None:
        self._reclaims.labels(reason=reason.value).inc()

    # --- suspend and resume ------------------------------------------------------------
    def _suspend_metrics(self, reg: CollectorRegistry) -> None:
        self._suspended = Gauge(
            "sandfleet_suspended_sessions",
            "Suspended sessions (no pod, a stored snapshot), by namespace.",
            ["namespace"],
            registry=reg,
        )
        self._snapshot_bytes = Gauge(
            "sandfleet_snapshot_bytes",
            "Bytes of suspended sessions' snapshots in the store, by namespace.",
            ["namespace"],
            registry=reg,
        )
        self._transition = Histogram(
            "sandfleet_suspend_transition_seconds",
            "Duration of a suspend (request to Suspended) or resume (request to Ready).",
            ["step"],
            buckets=SUSPEND_BUCKETS,
            registry=reg,
        )
        self._suspend_failures = Counter(
            "sandfleet_suspend_failures",
            "Failed suspends and resumes, by step and reason.",
            ["step", "reason"],
            registry=reg,
        )
        for step in ("suspend", "resume"):
            self._transition.labels(step=step)
            for reason in SUSPEND_FAILURES:
                self._suspend_failures.labels(step=step, reason=reason)

    def snapshot_held(self, namespace: str, size_bytes: int, *, held: bool) -> None:
        """A suspended session's snapshot starts (held) or stops counting."""
        sign = 1 if held else -1
        self._suspended.labels(namespace=namespace).inc(sign)
        self._snapshot_bytes.labels(namespace=namespace).inc(sign * size_bytes)

    def transition(self, step: str, seconds: float) -> None:
        """A suspend or resume ("suspend", "resume") succeeded after `seconds`."""
        self._transition.labels(step=step).observe(seconds)

    def transition_failed(self, step: str, reason: str) -> None:
        known = reason if reason in SUSPEND_FAILURES else OTHER
        self._suspend_failures.labels(step=step, reason=known).inc()

    # --- agent runs --------------------------------------------------------------------
    def agent_turn(self) -> None:
        self._turns.inc()

    def tool_called(self, tool: str, seconds: float) -> None:
        self._tool_calls.labels(tool=tool if tool in self._tools else OTHER).observe(seconds)

    def agent_finished(
        self, stop_reason: str, prompt_tokens: int = 0, completion_tokens: int = 0
    ) -> None:
        """A run ended (StopReason value) having used these many tokens in all."""
        known = stop_reason in self._stop_reasons
        self._runs.labels(stop_reason=stop_reason if known else OTHER).inc()
        # Counters only go up; a negative count from a confused caller is dropped.
        self._tokens.labels(kind="prompt").inc(max(prompt_tokens, 0))
        self._tokens.labels(kind="completion").inc(max(completion_tokens, 0))

    # --- exposition --------------------------------------------------------------------
    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The /metrics body and its Content-Type: Prometheus text, or OpenMetrics when the
        scraper's Accept header asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
