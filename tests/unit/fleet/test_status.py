"""Reading SandboxSession objects: phase, conditions, pod, agent progress, explanations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sandfleet.api import Phase
from sandfleet.fleet.status import SessionState


def session(status: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "s-1",
            "uid": "u",
            "resourceVersion": "7",
            **metadata,
        },
        "status": status or {},
    }


def condition(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_a_ready_raw_session_exposes_its_pod_and_token_secret() -> None:
    state = SessionState.from_object(
        session(
            {
                "phase": "Ready",
                "podName": "s-1",
                "podIP": "10.244.0.9",
                "nodeName": "localhost",
                "tokenSecretName": "s-1-token",
                "conditions": [
                    condition("Scheduled", "True", "PodScheduled"),
                    condition("Ready", "True", "RuntimeServing"),
                ],
            }
        )
    )

    assert state.reference == "ns/s-1"
    assert (state.phase, state.ready, state.finished) == (Phase.READY, True, False)
    assert (state.pod_ip, state.token_secret_name) == ("10.244.0.9", "s-1-token")
    assert state.agent is None
    assert state.explanation() == ""


def test_a_new_session_without_status_is_neither_ready_nor_finished() -> None:
    state = SessionState.from_object({"metadata": {"name": "x", "namespace": "n"}})

    assert (state.phase, state.ready, state.finished, state.deleting) == (None, False, False, False)
    assert state.summary() == "n/x: phase unknown"


def test_a_failed_session_is_explained_by_its_completed_condition() -> None:
    state = SessionState.from_object(
        session(
            {
                "phase": "Failed",
                "conditions": [
                    condition("Scheduled", "True", "PodScheduled"),
                    condition("Ready", "False", "ImagePullFailed", "no such image"),
                    condition("Completed", "True", "ImagePullFailed", "ErrImageNeverPull: x"),
                ],
            }
        )
    )

    assert state.finished and not state.ready
    assert state.explanation() == "ImagePullFailed: ErrImageNeverPull: x"
    assert state.summary() == "ns/s-1: phase Failed (ImagePullFailed: ErrImageNeverPull: x)"


def test_a_pending_session_is_explained_by_the_step_it_is_stuck_at() -> None:
    state = SessionState.from_object(
        session(
            {
                "phase": "Pending",
                "conditions": [condition("Scheduled", "False", "PodUnschedulable", "0/1 nodes")],
            }
        )
    )

    assert state.explanation() == "PodUnschedulable: 0/1 nodes"


def test_ready_true_with_a_finished_phase_does_not_count_as_ready() -> None:
    state = SessionState.from_object(
        session({"phase": "Expired", "conditions": [condition("Ready", "True", "RuntimeBound")]})
    )

    assert state.finished and not state.ready


def test_agent_progress_times_and_deletion_are_read() -> None:
    state = SessionState.from_object(
        session(
            {
                "phase": "Succeeded",
                "startTime": "2026-01-02T03:04:05Z",
                "completionTime": "2026-01-02T03:05:35Z",
                "trajectory": "dir:ns/s-1/u.jsonl",
                "agent": {
                    "turns": 4,
                    "promptTokens": 900,
                    "completionTokens": 80,
                    "stopReason": "submitted",
                    "result": "42",
                },
            },
            deletionTimestamp="2026-01-02T03:06:00Z",
        )
    )

    assert state.agent is not None
    assert (state.agent.turns, state.agent.prompt_tokens, state.agent.completion_tokens) == (
        4,
        900,
        80,
    )
    assert (state.agent.stop_reason, state.agent.result, state.agent.error) == (
        "submitted",
        "42",
        None,
    )
    assert state.start_time == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert state.duration_s == 90.0
    assert state.deleting
    assert state.trajectory == "dir:ns/s-1/u.jsonl"


def test_unknown_phases_and_malformed_fields_do_not_break_reading() -> None:
    state = SessionState.from_object(
        session(
            {
                "phase": "Hibernating",
                "conditions": "not a list",
                "agent": {"turns": "many"},
                "startTime": "yesterday",
            }
        )
    )

    assert state.phase is None
    assert state.conditions == ()
    assert state.agent is not None and state.agent.turns == 0
    assert state.start_time is None and state.duration_s is None


def test_agent_progress_says_whether_the_result_came_from_the_answer_file() -> None:
    from sandfleet.fleet.status import AgentProgress

    assert AgentProgress.from_status({"result": "42", "answerFromFile": True}).answer_from_file
    assert AgentProgress.from_status({"answerFromFile": False}).answer_from_file is False
    assert AgentProgress.from_status({"result": "x"}).answer_from_file is None  # older operator
    assert AgentProgress.from_status({"answerFromFile": "yes"}).answer_from_file is None
