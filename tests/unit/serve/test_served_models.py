"""ServedModel objects as served models: the spec mapped onto the config file's own type,
names "<namespace>/<name>", every spec mistake an InvalidSpec naming its field, and the
file's served_models table (cluster identity only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandfleet.api import Reason
from sandfleet.serve.config import ServeConfigError, load_serve_config
from sandfleet.serve.served_models import (
    NotServableError,
    model_name,
    namespace_of,
    parse_spec,
    to_served,
)


def served_model(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "ServedModel",
        "metadata": {"namespace": "team-a", "name": "coder", "generation": 1},
        "spec": {"upstream": {"baseURL": "http://vllm.models:8000/v1", "model": "qwen"}, **spec},
    }


def test_the_spec_maps_onto_the_served_model_config_with_its_namespace_and_key() -> None:
    obj = served_model(
        poolRef={"name": "warm"}, systemPrompt="Be brief. {{problem_statement}}", maxTurns=7,
        toolTimeoutSeconds=30, temperature=0.3, topP=0.9, maxTokens=512,
        description="a coder",
    )  # fmt: skip
    served = to_served("team-a", "coder", parse_spec(obj), "sk-up")
    assert served.name == "team-a/coder"
    spec = served.spec
    assert (spec.sandbox, spec.namespace, spec.pool, spec.template) == (
        "cluster", "team-a", "warm", None,
    )  # fmt: skip
    assert (spec.upstream.base_url, spec.upstream.model) == ("http://vllm.models:8000/v1", "qwen")
    assert spec.description == "a coder"
    agent = served.agent
    assert (agent.model, agent.base_url, agent.api_key) == (
        "qwen", "http://vllm.models:8000/v1", "sk-up",
    )  # fmt: skip
    assert (agent.max_turns, agent.tool_timeout_s, agent.max_tokens) == (7, 30.0, 512)
    assert (agent.temperature, agent.top_p) == (0.3, 0.9)
    assert agent.system_prompt == "Be brief. {{problem_statement}}"


def test_defaults_are_the_config_files_a_template_ref_and_no_key() -> None:
    served = to_served("team-a", "coder", parse_spec(served_model(templateRef={"name": "t"})), None)
    assert (served.spec.template, served.spec.pool, served.agent.api_key) == ("t", None, None)
    assert (served.agent.max_turns, served.agent.tool_timeout_s) == (30, 120.0)
    assert served.agent.system_prompt is None  # the paper's prompt


def test_an_edit_gives_a_different_served_model_and_no_edit_an_equal_one() -> None:
    first = to_served("team-a", "coder", parse_spec(served_model()), "k")
    assert first == to_served("team-a", "coder", parse_spec(served_model()), "k")
    assert first != to_served("team-a", "coder", parse_spec(served_model(maxTurns=3)), "k")
    assert first != to_served("team-a", "coder", parse_spec(served_model()), "rotated")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"poolRef": {"name": "p"}, "templateRef": {"name": "t"}}, "spec"),
        ({"maxTurns": 0}, "spec.maxTurns"),
        ({"temperature": 3}, "spec.temperature"),
        ({"upstream": {"baseURL": "http://user@evil/v1", "model": "m"}}, "spec.upstream.baseURL"),
        ({"upstream": {"baseURL": "ftp://x/v1", "model": "m"}}, "spec.upstream.baseURL"),
        ({"upstream": {"baseURL": "http://x/v1"}}, "spec.upstream.model"),
    ],
)
def test_every_spec_mistake_is_invalid_spec_naming_its_field(
    spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(NotServableError) as raised:
        parse_spec(served_model(**spec))
    assert raised.value.problem.reason is Reason.INVALID_SPEC
    assert raised.value.problem.message.startswith(field), raised.value.problem.message


def test_names_are_namespace_slash_name_and_file_names_have_no_namespace() -> None:
    assert model_name("team-a", "coder") == "team-a/coder"
    assert namespace_of("team-a/coder") == "team-a"
    assert namespace_of("coder") is None
    assert namespace_of("/coder") is None


CLUSTER = """
gateway: {address: "gw:50052", token_env: GW, identity: IDENTITY}
served_models: {namespaces: [team-a, team-b], resync_seconds: 5}
"""


def test_served_models_alone_is_a_complete_config_with_client_identity(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(CLUSTER.replace("IDENTITY", "client"))
    config = load_serve_config(path, {"GW": "t"}, backend="kubernetes")
    assert config.models == {}
    assert config.served_models is not None
    assert config.served_models.namespaces == ["team-a", "team-b"]
    assert config.served_models.resync_seconds == 5


def test_served_models_needs_client_identity(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(CLUSTER.replace("IDENTITY", "serve"))
    with pytest.raises(ServeConfigError, match=r"served_models: needs gateway\.identity = client"):
        load_serve_config(path, {"GW": "t", "SANDFLEET_SERVE_API_KEY": "k"})


def test_a_file_model_name_may_not_look_like_a_served_model(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text('models: {"a/b": {upstream: {base_url: "http://x/v1", model: m}}}\n')
    with pytest.raises(ServeConfigError, match=r"models\.a/b: no '/'"):
        load_serve_config(path, {})
