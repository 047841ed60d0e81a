"""model_retries: each retry reported to the listener of the run that made the request,
with the endpoint's Retry-After (capped) or backoff as its wait; the last failure raised."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sandfleet.agent import model_retries
from sandfleet.agent.model_retries import ModelRetry, Retryable, listening, with_retries


class Flaky(Exception):
    pass


def classify(error: BaseException) -> Retryable | None:
    if isinstance(error, Flaky):
        return Retryable(f"flaky: {error}", status_code=503, retry_after_s=0.01)
    return None


def failing(times: int, result: str) -> Callable[[], Awaitable[str]]:
    calls = {"n": 0}

    async def call() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise Flaky(str(calls["n"]))
        return result

    return call


async def test_concurrent_runs_each_hear_only_their_own_retries() -> None:
    heard: dict[str, list[ModelRetry]] = {"a": [], "b": []}

    async def run(name: str, failures: int) -> str:
        with listening(heard[name].append):
            return await with_retries(
                failing(failures, name),
                max_retries=3,
                classify=classify,
            )

    assert list(await asyncio.gather(run("a", 2), run("b", 1))) == ["a", "b"]
    assert [(r.attempt, r.attempts, r.cause) for r in heard["a"]] == [
        (1, 4, "flaky: 1"), (2, 4, "flaky: 2"),
    ]  # fmt: skip
    assert [(r.attempt, r.status_code, r.wait_s) for r in heard["b"]] == [(1, 503, 0.01)]


async def test_the_last_failure_is_raised_once_the_retries_are_spent() -> None:
    heard: list[ModelRetry] = []
    with listening(heard.append), pytest.raises(Flaky, match="3"):
        await with_retries(failing(5, "x"), max_retries=2, classify=classify)
    assert len(heard) == 2


async def test_a_failure_that_is_not_retryable_is_raised_at_once() -> None:
    async def call() -> str:
        raise ValueError("bad request")

    heard: list[ModelRetry] = []
    with listening(heard.append), pytest.raises(ValueError):
        await with_retries(call, max_retries=5, classify=classify)
    assert heard == []


async def test_an_endless_retry_after_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_retries, "MAX_RETRY_AFTER_S", 0.05)

    def patient(error: BaseException) -> Retryable | None:
        return Retryable("busy", retry_after_s=86400.0) if isinstance(error, Flaky) else None

    heard: list[ModelRetry] = []
    with listening(heard.append):
        assert await with_retries(failing(1, "ok"), max_retries=1, classify=patient) == "ok"
    assert heard[0].wait_s == 0.05
