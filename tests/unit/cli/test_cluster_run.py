"""`sandfleet run --backend kubernetes`: flags, the session body, outcomes and exit codes."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sandfleet.agent import AgentConfig, Task
from sandfleet.cli.cluster_run import (
    SessionProgress,
    cluster_run_command,
    outcome_of,
    session_for_task,
    stop_reason_of,
)
from sandfleet.cli.execution import ConfigurationError
from sandfleet.cli.exit_codes import ExitCode, outcome_exit_code
from sandfleet.cli.input_files import TextInputs
from sandfleet.cli.main import build_parser, settings_from_arguments
from sandfleet.fleet.status import SessionState
from sandfleet.settings import Settings, SettingsError, load_settings
from sandfleet.tasks import TaskSpec


def test_the_kubernetes_flags_reach_the_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["run", "Say hi.", "--backend", "kubernetes", "-n", "agents", "--pool", "warm",
         "--api-key-secret", "llm:token", "--ttl-seconds", "60", "--context", "prod",
         "--kubeconfig", "kc.yaml", "--rm"]
    )  # fmt: skip

    settings = settings_from_arguments(args, {"HOME": str(tmp_path)})

    assert settings.backend == "kubernetes"
    assert (settings.namespace, settings.pool, settings.template) == ("agents", "warm", None)
    assert settings.api_key_secret == "llm:token"
    assert (settings.ttl_seconds, settings.context) == (60, "prod")
    assert settings.kubeconfig == Path("kc.yaml")
    assert args.remove_session is True


def test_the_backend_and_namespace_come_from_the_environment_too(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "SANDFLEET_BACKEND": "kubernetes", "SANDFLEET_NAMESPACE": "x"}
    args = build_parser().parse_args(["run", "Say hi."])

    settings = settings_from_arguments(args, environ)

    assert (settings.backend, settings.namespace, args.remove_session) == ("kubernetes", "x", False)


def test_template_and_pool_exclude_each_other_on_every_layer(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "t", "--template", "a", "--pool", "b"])
    environ = {"HOME": str(tmp_path), "SANDFLEET_TEMPLATE": "a"}
    with pytest.raises(SettingsError, match="at most one of template and pool"):
        load_settings(flags={"pool": "b"}, environ=environ)


def test_a_malformed_secret_reference_or_backend_is_a_settings_error(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path)}
    with pytest.raises(SettingsError, match="api-key-secret"):
        load_settings(flags={"api_key_secret": "Not_A_Secret"}, environ=environ)
    with pytest.raises(SettingsError, match="backend"):
        load_settings(flags={"backend": "nomad"}, environ=environ)


def agent_config(base_url: str | None = "http://vllm:8000/v1") -> AgentConfig:
    return AgentConfig(model="m", base_url=base_url, api_key="sk-never-sent", max_turns=12)


def test_the_session_body_has_the_task_inputs_below_the_input_dir() -> None:
    spec = TaskSpec(task=Task(id="01_sales", prompt="Which region?"))
    settings = Settings(backend="kubernetes", api_key_secret="llm", ttl_seconds=120)
    inputs = TextInputs(contents={"sales.csv": "region,cents\n"}, modes={"sales.csv": 0o640})

    body = session_for_task(spec, agent_config(), settings, inputs)

    assert body["metadata"] == {"generateName": "01-sales-"}
    assert body["spec"]["files"] == [
        {"path": "/testbed/input/sales.csv", "content": "region,cents\n", "mode": 0o640}
    ]
    assert body["spec"]["agent"]["apiKeySecretRef"] == {"name": "llm", "key": "api-key"}
    assert body["spec"]["lifecycle"] == {"ttlSecondsAfterFinished": 120}
    assert "sk-never-sent" not in repr(body)


def test_openai_itself_without_a_key_secret_is_refused_with_the_fix() -> None:
    spec = TaskSpec(task=Task(id="t", prompt="p"))

    with pytest.raises(ConfigurationError, match="--api-key-secret"):
        session_for_task(spec, agent_config(base_url=None), Settings(), TextInputs({}, {}))


def finished(phase: str, reason: str, agent: dict[str, Any] | None = None) -> SessionState:
    status: dict[str, Any] = {
        "phase": phase,
        "startTime": "2026-01-01T00:00:00Z",
        "completionTime": "2026-01-01T00:00:30Z",
        "trajectory": "ns/s/uid.jsonl",
        "conditions": [
            {"type": "Completed", "status": "True", "reason": reason, "message": f"{reason}!"}
        ],
    }
    if agent is not None:
        status["agent"] = agent
    return SessionState.from_object(
        {"metadata": {"namespace": "ns", "name": "s"}, "status": status}
    )


@pytest.mark.parametrize(
    ("state", "stop_reason", "exit_code"),
    [
        (finished("Succeeded", "Submitted",
                  {"turns": 3, "stopReason": "submitted", "result": "42"}),
         "submitted", ExitCode.OK),
        (finished("Succeeded", "Submitted", {"turns": 3, "stopReason": "submitted"}),
         "submitted", ExitCode.NO_ANSWER),
        (finished("Failed", "MaxTurnsReached", {"turns": 12, "stopReason": "max_turns"}),
         "max_turns", ExitCode.NOT_SUBMITTED),
        (finished("Failed", "ModelError", {"turns": 1, "stopReason": "model_error"}),
         "model_error", ExitCode.MODEL_ERROR),
        (finished("Failed", "ModelRequestRejected"), "model_error", ExitCode.MODEL_ERROR),
        (finished("Failed", "SandboxLost", {"turns": 5}), "sandbox_lost", ExitCode.SANDBOX_ERROR),
        (finished("Failed", "ImagePullFailed"), "launch_failed", ExitCode.SANDBOX_ERROR),
        (finished("Failed", "SecretNotFound"), "invalid_task", ExitCode.USAGE),
        (finished("Failed", "Cancelled", {"turns": 2, "stopReason": "cancelled"}),
         "cancelled", ExitCode.CANCELLED),
        (finished("Expired", "DeadlineExceeded", {"turns": 7}),
         "deadline_exceeded", ExitCode.NOT_SUBMITTED),
        (finished("Failed", "SomethingNew", {"turns": 2}),
         "internal_error", ExitCode.NOT_SUBMITTED),
        (finished("Failed", "SomethingNew"), "launch_failed", ExitCode.SANDBOX_ERROR),
    ],
)  # fmt: skip
def test_finished_sessions_stop_and_exit_as_the_local_backend_would(
    state: SessionState, stop_reason: str, exit_code: ExitCode
) -> None:
    outcome = outcome_of(state, task_id="t", model="m", total_time_s=31.5)

    assert stop_reason_of(state) == stop_reason
    assert (outcome.stop_reason, outcome_exit_code(outcome)) == (stop_reason, exit_code)


def test_the_outcome_carries_the_answer_tokens_times_and_the_reason_of_a_failure() -> None:
    succeeded = finished(
        "Succeeded", "Submitted",
        {"turns": 3, "promptTokens": 100, "completionTokens": 20, "stopReason": "submitted",
         "result": "north 1200"},
    )  # fmt: skip
    failed = finished("Failed", "ImagePullFailed")

    good = outcome_of(succeeded, task_id="t", model="m", total_time_s=31.5)
    bad = outcome_of(failed, task_id="t", model="m", total_time_s=2.0)

    assert (good.answer, good.turns, good.prompt_tokens, good.completion_tokens) == (
        "north 1200", 3, 100, 20,
    )  # fmt: skip
    assert (good.wall_time_s, good.total_time_s, good.error) == (30.0, 31.5, None)
    assert good.trajectory == "ns/s/uid.jsonl"
    assert bad.error == "ImagePullFailed: ImagePullFailed!"


def state(phase: str | None, turns: int = 0, **status: Any) -> SessionState:
    body: dict[str, Any] = {"phase": phase, **status}
    if turns:
        body["agent"] = {"turns": turns, "promptTokens": turns * 10, "completionTokens": turns}
    return SessionState.from_object({"metadata": {"namespace": "ns", "name": "s"}, "status": body})


def test_progress_prints_each_phase_the_ready_pod_and_new_turns_once_last_turn_first() -> None:
    buffer = io.StringIO()
    progress = SessionProgress(Console(file=buffer, width=120, color_system=None), max_turns=12)
    ready = [{"type": "Ready", "status": "True", "reason": "RuntimeBound"}]

    for step in [
        state(None),
        state("Pending", conditions=[{"type": "Scheduled", "status": "False",
                                      "reason": "WaitingForWarmSandbox"}]),
        state("Ready", podName="warm-x", nodeName="n1", poolName="warm", conditions=ready),
        state("Running", 1, podName="warm-x", conditions=ready),
        state("Running", 1, podName="warm-x", conditions=ready),
        state("Running", 3, podName="warm-x", conditions=ready),
        state("Succeeded", 4, podName="warm-x"),
    ]:  # fmt: skip
        progress(step)

    assert buffer.getvalue().splitlines() == [
        "phase Pending  WaitingForWarmSandbox",
        "phase Ready",
        "sandbox ready pod warm-x on n1 (warm, from pool warm)",
        "phase Running",
        "turn 1/12  tokens 10 in / 1 out",
        "turn 3/12  tokens 30 in / 3 out",
        "turn 4/12  tokens 40 in / 4 out",
        "phase Succeeded",
    ]


def test_a_binary_input_file_stops_the_run_before_any_cluster_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\xff\xfe\x00")
    spec = TaskSpec(task=Task(id="t", prompt="p", files={"blob.bin": blob}))
    # A kubeconfig that does not exist: reaching the cluster step would fail differently.
    settings = Settings(backend="kubernetes", kubeconfig=tmp_path / "absent", api_key_secret="k")

    code = cluster_run_command(
        spec, agent_config(), settings, Console(file=io.StringIO()),
        remove=False, show_progress=False, as_json=False,
    )  # fmt: skip

    assert code == ExitCode.USAGE
    assert "blob.bin is not UTF-8 text" in capsys.readouterr().err
