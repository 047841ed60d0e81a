"""The server's Prometheus metrics, on a private registry (as the gateway's and operator's).

Label values come from closed sets: served model names from the config file (an unknown
name counts as "-"), the two endpoints, HTTP status codes the server itself sends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

# From a no-tool answer against a fast upstream (milliseconds) to long loops (minutes).
SECONDS_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
)  # fmt: skip
COUNT_BUCKETS: Final = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 100)
UNKNOWN_MODEL: Final = "-"


class ServeMetrics:
    def __init__(self, models: Iterable[str]) -> None:
        self._models = set(models)
        self.registry = reg = CollectorRegistry()
        self._requests = Counter(
            "sandfleet_serve_requests", "Requests answered, by model, endpoint and HTTP status.",
            ["model", "endpoint", "status"], registry=reg,
        )  # fmt: skip
        self._in_flight = Gauge(
            "sandfleet_serve_loops_in_flight", "Agent loops running now, by model.",
            ["model"], registry=reg,
        )  # fmt: skip
        self._turns = Histogram(
            "sandfleet_serve_turns", "Model turns per answered request.",
            ["model"], buckets=COUNT_BUCKETS, registry=reg,
        )  # fmt: skip
        self._tool_calls = Histogram(
            "sandfleet_serve_tool_calls", "Sandbox tool calls per answered request.",
            ["model"], buckets=COUNT_BUCKETS, registry=reg,
        )  # fmt: skip
        self._first_byte = Histogram(
            "sandfleet_serve_time_to_first_byte_seconds",
            "From a request's arrival to its first byte of answer (headers, or the first event).",
            ["model", "endpoint"], buckets=SECONDS_BUCKETS, registry=reg,
        )  # fmt: skip
        self._answer = Histogram(
            "sandfleet_serve_time_to_answer_seconds",
            "From a request's arrival to its complete answer.",
            ["model", "endpoint"], buckets=SECONDS_BUCKETS, registry=reg,
        )  # fmt: skip
        self._upstream = Histogram(
            "sandfleet_serve_upstream_seconds", "Each upstream model call (retries included).",
            ["model"], buckets=SECONDS_BUCKETS, registry=reg,
        )  # fmt: skip
        self._claim = Histogram(
            "sandfleet_serve_sandbox_claim_seconds", "Getting a sandbox inside a request.",
            ["model"], buckets=SECONDS_BUCKETS, registry=reg,
        )  # fmt: skip
        self._rejected = Counter(
            "sandfleet_serve_rate_limited", "Requests refused with 429 (a tenant at its limit).",
            ["model"], registry=reg,
        )  # fmt: skip

    def add_model(self, name: str) -> None:
        """Label a model served from now on by its name (a ServedModel object: the label
        values stay as many as the objects)."""
        self._models.add(name)

    def label(self, model: str) -> str:
        return model if model in self._models else UNKNOWN_MODEL

    def request_done(self, model: str, endpoint: str, status: int) -> None:
        self._requests.labels(self.label(model), endpoint, str(status)).inc()
        if status == 429:
            self._rejected.labels(self.label(model)).inc()

    def loop_started(self, model: str) -> None:
        self._in_flight.labels(self.label(model)).inc()

    def loop_ended(self, model: str, *, turns: int | None, tool_calls: int | None) -> None:
        label = self.label(model)
        self._in_flight.labels(label).dec()
        if turns is not None:
            self._turns.labels(label).observe(turns)
        if tool_calls is not None:
            self._tool_calls.labels(label).observe(tool_calls)

    def first_byte(self, model: str, endpoint: str, seconds: float) -> None:
        self._first_byte.labels(self.label(model), endpoint).observe(seconds)

    def answered(self, model: str, endpoint: str, seconds: float) -> None:
        self._answer.labels(self.label(model), endpoint).observe(seconds)

    def upstream_call(self, model: str, seconds: float) -> None:
        self._upstream.labels(self.label(model)).observe(seconds)

    def claimed(self, model: str, seconds: float) -> None:
        self._claim.labels(self.label(model)).observe(seconds)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition for a scrape: (body, content type), negotiated by Accept."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
