"""Retries of one model request, each reported to whoever listens (the run's trace and
trajectory), done with tenacity instead of inside the provider's SDK, where they were
invisible.

A Model adapter says which failures are worth another attempt (`Retryable`); this module
waits (the endpoint's Retry-After, else exponential backoff with jitter), tells the
listener of the current context, and tries again until the attempts are spent. The agent
loop sets the listener around each model call (`listening`), so one Model can serve many
concurrent runs and each run hears only its own retries.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import tenacity

from sandfleet.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

MAX_RETRY_AFTER_S = 60.0
"""An endpoint's Retry-After beyond this is capped (a misconfigured proxy must not park a
run for hours)."""
_BACKOFF_INITIAL_S = 0.5
_BACKOFF_MAX_S = 8.0


@dataclasses.dataclass(frozen=True, slots=True)
class Retryable:
    """Why a failed attempt may be retried, as the adapter classifies it."""

    cause: str
    """One line for a human: "HTTP 503: overloaded", "no answer within 600 s", ..."""
    status_code: int | None = None
    retry_after_s: float | None = None
    """The endpoint's own wait (Retry-After), when it sent one."""


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRetry:
    """One failed attempt that will be retried, reported before the wait."""

    attempt: int
    """The failed attempt, from 1."""
    attempts: int
    """Attempts allowed in all (1 + max_retries)."""
    cause: str
    status_code: int | None
    wait_s: float
    """How long the request waits before the next attempt."""
    attempt_s: float
    """How long the failed attempt took."""


RetryListener = Callable[[ModelRetry], None]

_LISTENER: contextvars.ContextVar[RetryListener | None] = contextvars.ContextVar(
    "sandfleet_model_retry_listener", default=None
)


@contextlib.contextmanager
def listening(listener: RetryListener | None) -> Iterator[None]:
    """Report the retries of model calls made in this block (this task) to `listener`."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    classify: Callable[[BaseException], Retryable | None],
) -> T:
    """`await call()`, retried up to `max_retries` times while `classify` says the failure is
    retryable; the last failure (or a non-retryable one) is raised as it was."""
    attempts = max_retries + 1
    attempt_started = time.perf_counter()

    def retryable(error: BaseException) -> bool:
        return classify(error) is not None

    def wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        found = classify(error) if error is not None else None
        if found is not None and found.retry_after_s is not None:
            return min(max(found.retry_after_s, 0.0), MAX_RETRY_AFTER_S)
        return backoff(state)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        nonlocal attempt_started
        error = state.outcome.exception() if state.outcome else None
        found = classify(error) if error is not None else None
        now = time.perf_counter()
        retry = ModelRetry(
            attempt=state.attempt_number,
            attempts=attempts,
            cause=found.cause if found else repr(error),
            status_code=found.status_code if found else None,
            wait_s=round(state.next_action.sleep if state.next_action else 0.0, 3),
            attempt_s=round(now - attempt_started, 3),
        )
        attempt_started = now + retry.wait_s
        # info, not warning: the run's trace and trajectory show each retry already.
        log.info(
            "model_retry", attempt=retry.attempt, attempts=attempts, cause=retry.cause,
            wait_s=retry.wait_s,
        )  # fmt: skip
        listener = _LISTENER.get()
        if listener is not None:
            listener(retry)

    backoff = tenacity.wait_exponential_jitter(
        multiplier=_BACKOFF_INITIAL_S, max=_BACKOFF_MAX_S, jitter=_BACKOFF_INITIAL_S
    )
    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=wait,
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=before_sleep,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("tenacity ended without a result or an error")  # reraise=True
