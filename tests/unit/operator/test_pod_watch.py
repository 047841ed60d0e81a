"""pod_problem's classification of pod states, and PodWaiter driven by pod index changes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandfleet.api import Reason
from sandfleet.fleet.pod_index import Pod, PodIndex
from sandfleet.operator import pod_watch
from sandfleet.operator.pod_watch import (
    PodFailedError,
    PodLostError,
    PodProblem,
    PodWaiter,
    is_running,
    is_scheduled,
    pod_problem,
    ready_as_is,
    ready_for_binding,
)

NS = "team-a"
ANSWER_S = 5.0
"""Bound on awaiting something that must happen at once: a hang fails instead of stalling."""


def pod(
    name: str = "s1",
    *,
    rv: int = 1,
    phase: str = "Pending",
    node: str | None = None,
    ip: str | None = None,
    ready: bool = False,
    **status: Any,
) -> Pod:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv)},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": conditions, **({"podIP": ip} if ip else {})}
        | status,
    }


def running(name: str = "s1", *, rv: int = 2, ready: bool = True) -> Pod:
    return pod(name, rv=rv, phase="Running", node="node-1", ip="10.0.0.7", ready=ready)


def waiting_container(reason: str, message: str = "") -> list[dict[str, Any]]:
    return [{"name": "runtime", "state": {"waiting": {"reason": reason, "message": message}}}]


def unschedulable(name: str = "s1", *, rv: int = 1, message: str | None = None) -> Pod:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    if message is not None:
        condition["message"] = message
    return pod(name, rv=rv, conditions=[condition])


async def settle() -> None:
    """Let every task that can run reach its next wait (no wall-clock time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture
def index() -> PodIndex:
    synced = PodIndex()
    synced.synced.set()
    return synced


# --- pod_problem ---------------------------------------------------------------------------
def test_a_healthy_pod_has_no_problem() -> None:
    assert pod_problem(pod()) is None
    assert pod_problem(running()) is None
    assert pod_problem(pod(containerStatuses=waiting_container("ContainerCreating"))) is None


def test_a_pod_being_deleted_is_a_lost_sandbox() -> None:
    deleting = running()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"

    assert pod_problem(deleting) == PodProblem(
        Reason.SANDBOX_LOST, "pod s1 is being deleted", final=True
    )


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (
            {"phase": "Failed", "reason": "Evicted", "message": "low on memory"},
            "Evicted: low on memory",
        ),
        (  # issue 26, item 9: a sandbox that fills its disk is told so
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "Pod ephemeral local storage usage exceeds the total limit of "
                "containers 1Gi. ",
            },
            "Evicted: Pod ephemeral local storage usage exceeds the total limit of containers 1Gi.",
        ),
        ({"phase": "Failed", "message": "node shut down"}, "node shut down"),
        ({"phase": "Failed"}, "its runtime exited (`kubectl describe pod s1` shows why)"),
        ({"phase": "Succeeded"}, "its runtime exited (`kubectl describe pod s1` shows why)"),
    ],
)
def test_a_pod_that_ended_is_a_lost_sandbox_with_the_kubelets_reason(
    status: dict[str, Any], detail: str
) -> None:
    ended = pod(**status)

    assert pod_problem(ended) == PodProblem(
        Reason.SANDBOX_LOST, f"pod s1 ended: {detail}", final=True
    )


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"]
)
def test_an_image_error_fails_for_good(reason: str) -> None:
    broken = pod(containerStatuses=waiting_container(reason, 'pull "nope:1" denied'))

    problem = pod_problem(broken)

    assert problem is not None
    assert (problem.reason, problem.final) == (Reason.IMAGE_PULL_FAILED, True)
    assert problem.message == f'pod s1: {reason}: pull "nope:1" denied'


def kubelet_waiting(reason: str, message: str) -> Pod:
    """A scheduled pod whose container the kubelet could not create yet, as the kubelet
    reports it (the status of a real pod at 64 claims in flight, names changed)."""
    body = pod(
        phase="Pending",
        node="node-1",
        hostIP="172.18.0.2",
        startTime="2026-11-27T14:02:11Z",
        conditions=[
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "message": "containers with unready status: [runtime]"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
             "message": "containers with unready status: [runtime]"},
            {"type": "PodScheduled", "status": "True"},
        ],
        containerStatuses=[{
            "name": "runtime",
            "image": "sandfleet/sandbox:dev",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": reason, "message": message}},
        }],
    )  # fmt: skip
    return body


TRANSIENT = [
    ("CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the cond"),
    ("CreateContainerConfigError", 'secret "s1-files" not found'),
    ("CreateContainerError", 'failed to reserve container name "runtime_s1": name is reserved'),
    ("RunContainerError", "context deadline exceeded"),
]  # fmt: skip


@pytest.mark.parametrize(("reason", "message"), TRANSIENT)
def test_a_container_the_kubelet_could_not_create_yet_is_a_passing_problem(
    reason: str, message: str
) -> None:
    problem = pod_problem(kubelet_waiting(reason, message))

    assert problem == PodProblem(
        Reason.CONTAINER_CREATE_FAILED, f"pod s1: {reason}: {message}", final=False
    )


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing"])
def test_a_container_being_created_is_no_problem(reason: str) -> None:
    assert pod_problem(kubelet_waiting(reason, "")) is None


def test_a_terminated_runtime_container_is_a_crash() -> None:
    crashed = pod(
        phase="Running",
        containerStatuses=[{"name": "runtime", "state": {"terminated": {"exitCode": 137}}}],
    )

    assert pod_problem(crashed) == PodProblem(
        Reason.CONTAINER_CRASHED, "pod s1: runtime exited", final=True
    )


def test_an_unschedulable_pod_is_a_problem_that_may_still_clear() -> None:
    problem = pod_problem(unschedulable(message="0/3 nodes are available: 3 Insufficient cpu."))

    assert problem == PodProblem(
        Reason.POD_UNSCHEDULABLE, "0/3 nodes are available: 3 Insufficient cpu.", final=False
    )


def test_an_unschedulable_pod_without_a_message_still_says_why() -> None:
    problem = pod_problem(unschedulable())

    assert problem is not None and problem.message == "no node fits the pod"


def test_a_pod_being_deleted_counts_as_lost_whatever_else_it_shows() -> None:
    both = pod(phase="Failed", containerStatuses=waiting_container("ErrImagePull"))
    both["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"

    problem = pod_problem(both)

    assert problem is not None and problem.reason == Reason.SANDBOX_LOST


# --- readiness predicates ------------------------------------------------------------------
def test_binding_needs_a_running_pod_with_an_address_but_not_the_kubelets_probe() -> None:
    started = running(ready=False)

    assert is_scheduled(started) and is_running(started)
    assert ready_for_binding(started)
    assert not ready_as_is(started)
    assert ready_as_is(running(ready=True))


def test_a_pending_pod_is_ready_for_nothing() -> None:
    pending = pod(node="node-1")

    assert is_scheduled(pending)
    assert not is_running(pending)
    assert not ready_for_binding(pending)
    assert not is_scheduled(pod())


# --- PodWaiter.until -----------------------------------------------------------------------
async def test_until_returns_at_once_for_a_pod_already_in_the_wanted_state(
    index: PodIndex,
) -> None:
    index.apply("ADDED", running())
    waiter = PodWaiter(index, NS, "s1", known=True)

    found = await asyncio.wait_for(waiter.until(ready_as_is, timeout_s=60), ANSWER_S)

    assert found["metadata"]["resourceVersion"] == "2"


async def test_until_waits_for_the_index_to_show_the_wanted_state(index: PodIndex) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=True)
    waiting = asyncio.create_task(waiter.until(ready_for_binding, timeout_s=60))
    await settle()
    assert not waiting.done()

    index.apply("MODIFIED", pod(rv=2, node="node-1"))  # scheduled, not running yet
    await settle()
    assert not waiting.done()
    index.apply("MODIFIED", running(rv=3, ready=False))

    found = await asyncio.wait_for(waiting, ANSWER_S)
    assert found["metadata"]["resourceVersion"] == "3"


async def test_until_reports_a_passing_problem_and_carries_on_when_it_clears(
    index: PodIndex,
) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=True)
    problems: list[PodProblem] = []
    waiting = asyncio.create_task(
        waiter.until(ready_for_binding, timeout_s=60, on_problem=problems.append)
    )
    await settle()

    index.apply("MODIFIED", unschedulable(rv=2, message="no nodes"))
    await settle()
    assert not waiting.done()
    assert [(p.reason, p.message) for p in problems] == [(Reason.POD_UNSCHEDULABLE, "no nodes")]
    index.apply("MODIFIED", running(rv=3))

    await asyncio.wait_for(waiting, ANSWER_S)


async def test_a_pod_with_a_problem_is_never_accepted_even_when_the_predicate_would(
    index: PodIndex,
) -> None:
    index.apply("ADDED", unschedulable())
    waiter = PodWaiter(index, NS, "s1", known=True)

    with pytest.raises(PodFailedError, match="still after 0s") as failed:
        await waiter.until(lambda _: True, timeout_s=0.05)
    assert failed.value.problem.reason == Reason.POD_UNSCHEDULABLE


async def test_until_gives_up_with_a_timeout_error_after_its_timeout(index: PodIndex) -> None:
    index.apply("ADDED", pod())
    waiter = PodWaiter(index, NS, "s1", known=True)

    with pytest.raises(TimeoutError):
        await waiter.until(ready_as_is, timeout_s=0.05)


async def test_until_raises_sandbox_lost_when_the_pod_is_deleted_while_waiting(
    index: PodIndex,
) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=False)
    waiting = asyncio.create_task(waiter.until(ready_as_is, timeout_s=60))
    await settle()

    index.apply("DELETED", pod(rv=2))

    with pytest.raises(PodLostError, match="pod s1 no longer exists"):
        await asyncio.wait_for(waiting, ANSWER_S)


async def test_until_raises_sandbox_lost_when_the_pod_ends(index: PodIndex) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=True)
    waiting = asyncio.create_task(waiter.until(ready_as_is, timeout_s=60))
    await settle()

    index.apply("MODIFIED", pod(rv=2, phase="Failed", reason="Evicted"))

    with pytest.raises(PodLostError, match="pod s1 ended: Evicted"):
        await asyncio.wait_for(waiting, ANSWER_S)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ({"containerStatuses": waiting_container("ImagePullBackOff")}, Reason.IMAGE_PULL_FAILED),
        (
            {"containerStatuses": [{"name": "runtime", "state": {"terminated": {"exitCode": 1}}}]},
            Reason.CONTAINER_CRASHED,
        ),
    ],
)
async def test_until_fails_the_pod_for_good_on_an_image_error_or_a_crash(
    index: PodIndex, status: dict[str, Any], reason: Reason
) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=True)
    problems: list[PodProblem] = []
    waiting = asyncio.create_task(
        waiter.until(ready_as_is, timeout_s=60, on_problem=problems.append)
    )
    await settle()

    index.apply("MODIFIED", pod(rv=2, **status))

    with pytest.raises(PodFailedError) as failed:
        await asyncio.wait_for(waiting, ANSWER_S)
    assert failed.value.problem.reason == reason
    assert str(failed.value) == failed.value.problem.message
    assert problems == []  # final problems are raised, not reported as passing


async def test_until_waits_out_a_secret_cache_not_synced_yet_and_takes_the_pod_after(
    index: PodIndex,
) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=True)
    problems: list[PodProblem] = []
    waiting = asyncio.create_task(
        waiter.until(ready_as_is, timeout_s=60, on_problem=problems.append)
    )
    await settle()

    index.apply("MODIFIED", kubelet_waiting(*TRANSIENT[0]) | {"metadata": pod(rv=2)["metadata"]})
    await settle()
    assert not waiting.done()
    index.apply("MODIFIED", running(rv=3))

    assert (await asyncio.wait_for(waiting, ANSWER_S))["metadata"]["resourceVersion"] == "3"
    assert [p.reason for p in problems] == [Reason.CONTAINER_CREATE_FAILED]


async def test_a_container_still_not_created_at_the_deadline_fails_with_the_kubelets_reason(
    index: PodIndex,
) -> None:
    index.apply("ADDED", kubelet_waiting(*TRANSIENT[1]))
    waiter = PodWaiter(index, NS, "s1", known=True)

    with pytest.raises(PodFailedError) as failed:
        await waiter.until(ready_as_is, timeout_s=0.05)

    assert failed.value.problem.reason == Reason.CONTAINER_CREATE_FAILED
    assert 'CreateContainerConfigError: secret "s1-files" not found' in str(failed.value)


# --- the unseen-grace rule -----------------------------------------------------------------
async def test_a_pod_just_created_is_not_lost_before_it_shows_up_in_the_watch(
    index: PodIndex,
) -> None:
    waiter = PodWaiter(index, NS, "s1", known=False)

    with pytest.raises(TimeoutError):  # not PodLostError: the grace has not passed
        await waiter.until(ready_as_is, timeout_s=0.05)


async def test_a_pod_just_created_is_found_once_the_watch_delivers_it(index: PodIndex) -> None:
    waiter = PodWaiter(index, NS, "s1", known=False)
    waiting = asyncio.create_task(waiter.until(ready_as_is, timeout_s=60))
    await settle()

    index.apply("ADDED", running())

    await asyncio.wait_for(waiting, ANSWER_S)


async def test_a_pod_never_seen_is_lost_once_the_grace_has_passed(
    index: PodIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pod_watch, "UNSEEN_GRACE_S", 0.0)
    waiter = PodWaiter(index, NS, "s1", known=False)

    with pytest.raises(PodLostError, match="pod s1 no longer exists"):
        await asyncio.wait_for(waiter.until(ready_as_is, timeout_s=60), ANSWER_S)


async def test_a_pod_known_to_exist_is_lost_as_soon_as_the_synced_index_lacks_it(
    index: PodIndex,
) -> None:
    waiter = PodWaiter(index, NS, "s1", known=True)

    with pytest.raises(PodLostError):
        await asyncio.wait_for(waiter.until(ready_as_is, timeout_s=60), ANSWER_S)


async def test_a_pod_seen_once_is_lost_as_soon_as_it_is_missing(index: PodIndex) -> None:
    index.apply("ADDED", pod(rv=1))
    waiter = PodWaiter(index, NS, "s1", known=False)
    assert waiter.current() is not None
    index.apply("DELETED", pod(rv=2))

    with pytest.raises(PodLostError):
        await asyncio.wait_for(waiter.until(ready_as_is, timeout_s=60), ANSWER_S)


async def test_before_the_first_list_a_missing_pod_proves_nothing() -> None:
    unsynced = PodIndex()
    waiter = PodWaiter(unsynced, NS, "s1", known=True)

    with pytest.raises(TimeoutError):
        await waiter.until(ready_as_is, timeout_s=0.05)


# --- PodWaiter.until_lost ------------------------------------------------------------------
async def test_until_lost_returns_once_the_pod_is_deleted(index: PodIndex) -> None:
    index.apply("ADDED", running())
    waiter = PodWaiter(index, NS, "s1", known=True)
    lost = asyncio.create_task(waiter.until_lost())
    await settle()
    assert not lost.done()

    index.apply("DELETED", running(rv=3))

    assert await asyncio.wait_for(lost, ANSWER_S) == "pod s1 was deleted"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"phase": "Failed", "reason": "OOMKilled"}, "pod s1 ended: OOMKilled"),
        (
            {"phase": "Running", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]},
            "pod s1: runtime exited",
        ),
    ],
)
async def test_until_lost_returns_the_reason_once_the_pod_fails_for_good(
    index: PodIndex, status: dict[str, Any], message: str
) -> None:
    index.apply("ADDED", running())
    waiter = PodWaiter(index, NS, "s1", known=True)
    lost = asyncio.create_task(waiter.until_lost())
    await settle()

    index.apply("MODIFIED", pod(rv=3, **status))

    assert await asyncio.wait_for(lost, ANSWER_S) == message


async def test_until_lost_returns_once_deletion_starts(index: PodIndex) -> None:
    index.apply("ADDED", running())
    waiter = PodWaiter(index, NS, "s1", known=True)
    lost = asyncio.create_task(waiter.until_lost())
    await settle()
    deleting = running(rv=3)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"

    index.apply("MODIFIED", deleting)

    assert await asyncio.wait_for(lost, ANSWER_S) == "pod s1 is being deleted"


async def test_until_lost_ignores_changes_that_leave_the_sandbox_alive(index: PodIndex) -> None:
    index.apply("ADDED", running())
    waiter = PodWaiter(index, NS, "s1", known=True)
    lost = asyncio.create_task(waiter.until_lost())
    await settle()

    index.apply("MODIFIED", running(rv=3, ready=False))
    index.apply("MODIFIED", unschedulable(rv=4))  # not final: the pod may still come back
    await settle()

    assert not lost.done()
    lost.cancel()
    with pytest.raises(asyncio.CancelledError):
        await lost


async def test_closing_a_waiter_forgets_its_pods_signal(index: PodIndex) -> None:
    waiter = PodWaiter(index, NS, "s1", known=True)
    before = index.signal(NS, "s1")

    waiter.close()

    assert index.signal(NS, "s1") is not before


async def test_until_lost_counts_a_pod_that_never_appeared_as_lost_after_the_grace(
    index: PodIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pod_watch, "UNSEEN_GRACE_S", 0.0)
    waiter = PodWaiter(index, NS, "s1", known=False)

    assert await asyncio.wait_for(waiter.until_lost(), ANSWER_S) == "pod s1 was deleted"
