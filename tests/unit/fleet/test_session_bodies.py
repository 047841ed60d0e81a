"""SandboxSession bodies from SDK arguments and from the CLI's AgentConfig + Task (pure)."""

from __future__ import annotations

import json

import pytest

from sandfleet.agent import AgentConfig, Task
from sandfleet.api import (
    API_VERSION,
    SESSION_KIND,
    AgentSpec,
    EgressMode,
    KeyRef,
    LifecycleSpec,
    PodTemplate,
    SandboxSessionSpec,
)
from sandfleet.cluster.session_specs import default_paths, managed_session_spec
from sandfleet.fleet.manifests import (
    MAX_INLINE_FILES,
    ManifestError,
    decimal_string,
    file_sources,
    generate_name_for,
    raw_session_spec,
    secret_key_ref,
    session_body,
)
from sandfleet.sandbox.facade import SandboxPaths


def test_a_raw_session_carries_only_what_was_asked_for() -> None:
    spec = raw_session_spec(
        pool="warm",
        env={"LANG": "C.UTF-8"},
        files=file_sources({"notes.txt": "hello"}),
        lifecycle=LifecycleSpec(idle_timeout_seconds=600),
        egress="Internet",
    )

    body = session_body(spec)

    assert body == {
        "apiVersion": API_VERSION,
        "kind": SESSION_KIND,
        "metadata": {"generateName": "sbx-"},
        "spec": {
            "poolRef": {"name": "warm"},
            "env": [{"name": "LANG", "value": "C.UTF-8"}],
            "files": [{"path": "notes.txt", "content": "hello"}],
            "lifecycle": {"idleTimeoutSeconds": 600},
            "network": {"egress": "Internet"},
        },
    }


def test_a_named_raw_session_with_nothing_set_is_an_empty_spec() -> None:
    body = session_body(raw_session_spec(), name="mine", labels={"team": "rl"})

    assert body["metadata"] == {"name": "mine", "labels": {"team": "rl"}}
    assert body["spec"] == {}


def test_bodies_read_back_into_the_operators_spec_model_unchanged() -> None:
    spec = raw_session_spec(
        pod=PodTemplate(image="python:3.12", workdir="/work"),
        env={"A": "1"},
        files=file_sources({"/etc/motd": "hi"}, modes={"/etc/motd": 0o600}),
        egress=EgressMode.ALL,
    )

    assert SandboxSessionSpec.model_validate(session_body(spec)["spec"]) == spec


def test_template_and_pool_together_are_refused_before_any_request() -> None:
    with pytest.raises(ManifestError, match="at most one of templateRef, template and poolRef"):
        raw_session_spec(template="t", pool="p")


def test_unknown_egress_modes_and_bad_env_names_are_readable_errors() -> None:
    with pytest.raises(ManifestError, match="Everywhere"):
        raw_session_spec(egress="Everywhere")
    with pytest.raises(ManifestError, match="NOT A NAME"):
        raw_session_spec(env={"NOT A NAME": "x"})


def config(**changes: object) -> AgentConfig:
    values: dict[str, object] = {
        "model": "qwen3-coder",
        "base_url": "http://vllm.models:8000/v1",
        "api_key": "sk-local-secret-value",
        "max_turns": 30,
        "max_tokens": 2048,
        "temperature": 0.7,
        "tool_timeout_s": 90.5,
    }
    values.update(changes)
    return AgentConfig(**values)  # type: ignore[arg-type]


def test_a_managed_session_maps_the_loop_settings_and_never_carries_the_local_key() -> None:
    spec = managed_session_spec(
        config(),
        Task(id="t1", prompt="Sum the numbers."),
        api_key_secret=KeyRef(name="openai", key="api-key"),
        template="python",
        ttl_seconds_after_finished=600,
    )

    body = session_body(spec, generate_name="t1-")

    assert body["spec"] == {
        "templateRef": {"name": "python"},
        "agent": {
            "model": "qwen3-coder",
            "prompt": "Sum the numbers.",
            "baseURL": "http://vllm.models:8000/v1",
            "apiKeySecretRef": {"name": "openai", "key": "api-key"},
            "maxTurns": 30,
            "maxTokens": 2048,
            "temperature": "0.7",
            "toolTimeoutSeconds": 91,
        },
        "lifecycle": {"ttlSecondsAfterFinished": 600},
    }
    assert "sk-local-secret-value" not in json.dumps(body)


def test_sampling_knobs_and_the_extra_body_travel_in_the_agent_spec() -> None:
    extra = {"chat_template_kwargs": {"enable_thinking": False}}
    agent = managed_session_spec(
        config(top_p=0.95, seed=7, extra_body=extra), Task(id="t", prompt="p")
    ).agent

    assert agent is not None
    assert (agent.top_p, agent.seed) == ("0.95", 7)
    assert agent.extra_body == '{"chat_template_kwargs": {"enable_thinking": false}}'
    assert agent.extra_body_value == extra
    dumped = agent.model_dump(by_alias=True, exclude_none=True)
    assert {"topP", "seed", "extraBody"} <= dumped.keys()


def test_an_extra_body_that_is_no_json_object_is_refused_by_the_spec_model() -> None:
    with pytest.raises(ValueError, match="extraBody must be a JSON object"):
        AgentSpec(model="m", prompt="p", extra_body="[1]")
    with pytest.raises(ValueError, match="extraBody is not valid JSON"):
        AgentSpec(model="m", prompt="p", extra_body="{")


def test_a_system_prompt_override_wins_over_the_tasks_own() -> None:
    task = Task(id="t", prompt="p", system_prompt="From the task.")
    agent = managed_session_spec(config(system_prompt_override="From --system-prompt."), task).agent

    assert agent is not None and agent.system_prompt == "From --system-prompt."


def test_the_tasks_templates_are_sent_as_templates_for_the_operator_to_fill() -> None:
    task = Task(
        id="t",
        prompt="Which region sold most?",
        system_prompt="Work in {working_dir}.",
        instance_prompt="<problem>{problem_statement}</problem> Inputs: {input_dir}",
    )

    agent = managed_session_spec(config(), task).agent

    assert agent is not None
    assert agent.prompt == "Which region sold most?"
    # Both stay templates: the operator's loop fills them with the pod's real workdir.
    assert agent.instance_prompt == "<problem>{problem_statement}</problem> Inputs: {input_dir}"
    assert agent.system_prompt == "Work in {working_dir}."


def test_the_configs_system_prompt_applies_when_the_task_has_none() -> None:
    agent = managed_session_spec(config(system_prompt="Be brief."), Task(id="t", prompt="p")).agent

    assert agent is not None and agent.system_prompt == "Be brief."


def test_a_task_that_moves_the_workdir_gets_an_inline_template_with_that_workdir() -> None:
    spec = managed_session_spec(
        config(), Task(id="t", prompt="p"), paths=SandboxPaths.under("/work")
    )

    assert spec.template == PodTemplate(workdir="/work")
    assert session_body(spec)["spec"]["template"] == {"workdir": "/work"}


def test_layouts_the_cluster_cannot_reproduce_are_refused_with_the_reason() -> None:
    scattered = SandboxPaths(input_dir="/data", output_dir="/testbed/output")
    with pytest.raises(ManifestError, match="input_dir /data"):
        managed_session_spec(config(), Task(id="t", prompt="p"), paths=scattered)
    with pytest.raises(ManifestError, match="the template decides it"):
        managed_session_spec(
            config(), Task(id="t", prompt="p"), paths=SandboxPaths.under("/w"), pool="warm"
        )


def test_file_sources_go_below_the_base_dir_and_keep_permission_bits() -> None:
    sources = file_sources(
        {"data/a.csv": "x,y\n", "/abs/run.sh": "#!/bin/sh\n"},
        base_dir="/testbed/input",
        modes={"/abs/run.sh": 0o100755},
    )

    assert [(s.path, s.content, s.mode) for s in sources] == [
        ("/testbed/input/data/a.csv", "x,y\n", 0o644),
        ("/abs/run.sh", "#!/bin/sh\n", 0o755),
    ]


def test_inline_files_beyond_the_budget_or_the_count_limit_are_refused() -> None:
    with pytest.raises(ManifestError, match="at most 10 bytes"):
        file_sources({"a": "12345", "b": "678901"}, max_total_bytes=10)
    many = {f"f{i}": "" for i in range(MAX_INLINE_FILES + 1)}
    with pytest.raises(ManifestError, match=f"at most {MAX_INLINE_FILES}"):
        file_sources(many)


def test_the_budget_counts_utf8_bytes_not_characters() -> None:
    with pytest.raises(ManifestError):
        file_sources({"a": "é" * 6}, max_total_bytes=10)
    assert file_sources({"a": "é" * 5}, max_total_bytes=10)[0].content == "é" * 5


def test_secret_references_default_their_key() -> None:
    assert secret_key_ref("openai") == KeyRef(name="openai", key="api-key")
    assert secret_key_ref("llm:OPENAI_API_KEY") == KeyRef(name="llm", key="OPENAI_API_KEY")
    with pytest.raises(ManifestError):
        secret_key_ref(":key")


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.7, "0.7"), (1.0, "1"), (0.0, "0"), (1.25, "1.25"), (2, "2"), (0.1 + 0.2, "0.3")],
)
def test_temperatures_become_plain_decimal_strings(value: float, text: str) -> None:
    assert decimal_string(value) == text


def test_non_finite_temperatures_are_refused() -> None:
    with pytest.raises(ManifestError):
        decimal_string(float("nan"))


@pytest.mark.parametrize(
    ("task_id", "prefix"),
    [
        ("01_sales_by_region", "01-sales-by-region-"),
        ("Prompt-ABC123", "prompt-abc123-"),
        ("___", "task-"),
        ("x" * 100, "x" * 40 + "-"),
        ("a" * 39 + "_b", "a" * 39 + "-"),
    ],
)
def test_generated_names_show_the_task_and_stay_short(task_id: str, prefix: str) -> None:
    assert generate_name_for(task_id) == prefix


def test_the_default_layout_follows_the_workdir() -> None:
    assert default_paths(None) == SandboxPaths()
    assert default_paths("/testbed") == SandboxPaths()
    assert default_paths("/srv").output_dir == "/srv/output"
