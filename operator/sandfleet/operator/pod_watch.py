"""Waiting for a sandbox pod to reach a state, on the pod index's change signals.

The classification of a pod's state (pure functions at the top) is what the session's
conditions report: unschedulable, image problems, a crashed runtime, a vanished pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from sandfleet.api import Reason
from sandfleet.errors import SandfleetError
from sandfleet.fleet.pod_index import Pod, PodIndex, pod_ip, pod_is_ready

_IMAGE_PROBLEMS = {"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"}
"""Waiting reasons that fail the session at once: a retry pulls the same missing image."""
_CREATE_PROBLEMS = {
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
}
"""Waiting reasons the kubelet retries on its own and that often clear up: a secret cache not
synced yet ("failed to sync secret cache"), a name still held by a removed container, a
runtime busy under load. They become final only at the session's start deadline."""
UNSEEN_GRACE_S = 30.0
"""A pod we just created may take this long to show up in the watch before it counts as
lost."""


@dataclasses.dataclass(frozen=True, slots=True)
class PodProblem:
    reason: Reason
    message: str
    final: bool
    """False for states that may still clear up (unschedulable now, a node may come)."""


class PodLostError(SandfleetError):
    """The session's pod is gone or its runtime died (the operator's view; the SDK's is
    sandfleet.errors.SandboxLostError, raised when the runtime stops answering)."""


def pod_problem(pod: Pod) -> PodProblem | None:
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    if pod["metadata"].get("deletionTimestamp"):
        return PodProblem(Reason.SANDBOX_LOST, f"pod {name} is being deleted", final=True)
    if status.get("phase") in {"Failed", "Succeeded"}:
        # Both when both are there: an eviction's reason is "Evicted", its message says why
        # (e.g. "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi.").
        # Neither: the kubelet may still have ended it (an eviction for disk use leaves the pod
        # Succeeded when the runtime exits 0 on SIGTERM), and then only its Events say so.
        said = [status[key].strip() for key in ("reason", "message") if status.get(key)]
        detail = ": ".join(said) or f"its runtime exited (`kubectl describe pod {name}` shows why)"
        return PodProblem(Reason.SANDBOX_LOST, f"pod {name} ended: {detail}", final=True)
    for container in status.get("containerStatuses") or []:
        if (problem := _container_problem(name, container)) is not None:
            return problem
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or "no node fits the pod"
            return PodProblem(Reason.POD_UNSCHEDULABLE, message, final=False)
    return None


def _container_problem(pod_name: str, container: dict[str, Any]) -> PodProblem | None:
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    reason = waiting.get("reason")
    message = f"pod {pod_name}: {reason}: {waiting.get('message', '')}".strip()
    if reason in _IMAGE_PROBLEMS:
        return PodProblem(Reason.IMAGE_PULL_FAILED, message, final=True)
    if reason in _CREATE_PROBLEMS:
        return PodProblem(Reason.CONTAINER_CREATE_FAILED, message, final=False)
    if state.get("terminated"):
        return PodProblem(Reason.CONTAINER_CRASHED, f"pod {pod_name}: runtime exited", True)
    return None


def is_scheduled(pod: Pod) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def is_running(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and pod_ip(pod) is not None


class PodWaiter:
    """Waits on one pod of one namespace."""

    def __init__(self, index: PodIndex, namespace: str, name: str, *, known: bool) -> None:
        self._index = index
        self._namespace = namespace
        self.name = name
        self._created_at = time.monotonic()
        self._seen = known
        """True once the pod was in the index (or was known to exist before we started)."""

    def current(self) -> Pod | None:
        pod = self._index.get(self._namespace, self.name)
        if pod is not None:
            self._seen = True
        return pod

    async def until(
        self,
        accept: Callable[[Pod], bool],
        *,
        timeout_s: float,
        on_problem: Callable[[PodProblem], None] | None = None,
    ) -> Pod:
        """The pod once `accept(pod)`; raises PodLostError when it vanishes or fails for
        good, PodFailedError at once for a final problem and after `timeout_s` for a passing
        one still there (unschedulable, a container not created yet), TimeoutError after
        `timeout_s` otherwise."""
        signal = self._index.signal(self._namespace, self.name)
        deadline = time.monotonic() + timeout_s
        problem: PodProblem | None = None
        while True:
            signal.clear()
            pod = self.current()
            if pod is None:
                if self._gone():
                    raise PodLostError(f"pod {self.name} no longer exists")
            else:
                problem = pod_problem(pod)
                if problem is not None and problem.final:
                    if problem.reason == Reason.SANDBOX_LOST:
                        raise PodLostError(problem.message)
                    raise PodFailedError(problem)
                if problem is not None and on_problem is not None:
                    on_problem(problem)
                if problem is None and accept(pod):
                    return pod
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if pod is not None and problem is not None:
                    late = f"{problem.message} (still after {timeout_s:.0f}s)"
                    raise PodFailedError(PodProblem(problem.reason, late, final=True))
                raise TimeoutError(f"pod {self.name} not ready after {timeout_s:.0f}s")
            next_check = self._next_check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    signal.wait(), remaining if next_check is None else min(remaining, next_check)
                )

    async def until_lost(self) -> str:
        """Returns (with the reason) once the pod is gone or has failed for good."""
        signal = self._index.signal(self._namespace, self.name)
        while True:
            signal.clear()
            pod = self.current()
            if pod is None and self._gone():
                return f"pod {self.name} was deleted"
            if pod is not None and (problem := pod_problem(pod)) is not None and problem.final:
                return problem.message
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), self._next_check())

    def _next_check(self) -> float | None:
        """How long to wait for a change before looking again without one: only an unseen
        pod needs that (its grace period may run out); otherwise every change signals.
        (One timer per waiter would cost thousands of wake-ups a second at scale.)"""
        if self._seen:
            return None
        if not self._index.synced.is_set():
            return 1.0
        return max(0.05, self._created_at + UNSEEN_GRACE_S - time.monotonic())

    def _gone(self) -> bool:
        if not self._index.synced.is_set():
            return False
        return self._seen or time.monotonic() - self._created_at > UNSEEN_GRACE_S

    def close(self) -> None:
        self._index.forget_signal(self._namespace, self.name)


class PodFailedError(SandfleetError):
    """The pod failed for good in a way a retry would repeat (image pull, crashed runtime)."""

    def __init__(self, problem: PodProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def ready_for_binding(pod: Pod) -> bool:
    """The runtime can be dialled: the pod runs and has an address (readiness not needed:
    the bind waits for the runtime itself, which is faster than the kubelet's probe)."""
    return is_running(pod)


def ready_as_is(pod: Pod) -> bool:
    return is_running(pod) and pod_is_ready(pod)
