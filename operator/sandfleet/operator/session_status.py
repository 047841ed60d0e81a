"""A session's status as its worker last wrote it, and the patches that publish it.

The worker is the only writer of a session's status, so it keeps the authoritative copy
here and sends merge patches to the status subresource: phase changes go out at once,
agent progress (turns, tokens) at a bounded rate.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from sandfleet.api import (
    AGENT_RESULT_LIMIT_CHARS,
    API_VERSION,
    SESSION_PLURAL,
    ConditionType,
    Phase,
    Reason,
)
from sandfleet.fleet.conditions import rfc3339, set_condition
from sandfleet.kube import KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.metrics import OperatorMetrics

log = get_logger(__name__)

RESULT_LIMIT_CHARS = AGENT_RESULT_LIMIT_CHARS
"""status.agent.result is a preview; the trajectory has everything."""


class SessionStatus:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        name: str,
        *,
        generation: int,
        current: dict[str, Any],
        metrics: OperatorMetrics,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self._kube = kube
        self._path = resource_path(API_VERSION, SESSION_PLURAL, namespace, name, "status")
        self._generation = generation
        self._status: dict[str, Any] = dict(current)
        self._dirty: dict[str, Any] = {}
        self._metrics = metrics
        self._clock = clock
        self._last_flush = 0.0
        phase = current.get("phase")
        self._phase: Phase | None = Phase(phase) if phase in set(Phase) else None
        metrics.session_phase_changed(None, self._phase)

    # --- reading -------------------------------------------------------------------------
    @property
    def phase(self) -> Phase | None:
        return self._phase

    def get(self, key: str) -> Any:
        return self._status.get(key)

    def condition_true(self, type_: ConditionType) -> bool:
        return any(
            c.get("type") == type_ and c.get("status") == "True"
            for c in self._status.get("conditions") or []
        )

    def now(self) -> dt.datetime:
        return self._clock()

    def timestamp(self) -> str:
        return rfc3339(self._clock())

    # --- writing -------------------------------------------------------------------------
    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            if self._status.get(key) != value:
                self._status[key] = value
                self._dirty[key] = value

    def set_phase(self, phase: Phase) -> None:
        if phase != self._phase:
            self._metrics.session_phase_changed(self._phase, phase)
            self._phase = phase
            self.set(phase=phase.value)

    def condition(
        self,
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: str = "",
        *,
        generation: int | None = None,
    ) -> None:
        """Set a condition; `generation`: the spec generation it answers, where that is newer
        than the one this worker started with (a spec.suspend request refused)."""
        conditions = set_condition(
            self._status.get("conditions") or [],
            type=type_,
            status="True" if status else "False",
            reason=reason,
            message=message,
            generation=self._generation if generation is None else generation,
            now=self._clock(),
        )
        self.set(conditions=conditions)

    def agent_progress(
        self,
        *,
        turns: int,
        prompt_tokens: int,
        completion_tokens: int,
        stop_reason: str | None = None,
        result: str | None = None,
        answer_from_file: bool | None = None,
        error: str | None = None,
    ) -> None:
        agent: dict[str, Any] = {
            "turns": turns,
            "promptTokens": prompt_tokens,
            "completionTokens": completion_tokens,
        }
        if stop_reason is not None:
            agent["stopReason"] = stop_reason
        if result is not None:
            agent["result"] = result[:RESULT_LIMIT_CHARS]
        if answer_from_file is not None:
            agent["answerFromFile"] = answer_from_file
        if error is not None:
            agent["error"] = error[:RESULT_LIMIT_CHARS]
        self.set(agent=agent)

    async def flush(self, *, throttle_s: float = 0.0) -> bool:
        """Send what changed since the last flush; with `throttle_s`, only if at least that
        long has passed (progress updates). Returns whether a patch was sent."""
        if not self._dirty:
            return False
        if throttle_s and time.monotonic() - self._last_flush < throttle_s:
            return False
        patch = {**self._dirty, "observedGeneration": self._generation}
        self._dirty = {}
        self._last_flush = time.monotonic()
        try:
            await self._kube.patch(self._path, {"status": patch})
        except NotFoundError:
            log.info("session_status_dropped", path=self._path, reason="session gone")
            return False
        except BaseException:
            # Not sent: the next flush carries these fields (unless they changed since).
            patch.pop("observedGeneration")
            self._dirty = {**patch, **self._dirty}
            raise
        return True

    def forget(self) -> None:
        """The worker is ending: its session no longer counts in the phase gauge."""
        self._metrics.session_phase_changed(self._phase, None)
