"""The served-models file: TOML and YAML, the paper's loop settings, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.errors import GatewayConfigError
from sandfleet.serve.cluster_sandboxes import resolve_target
from sandfleet.serve.config import ServeConfigError, load_serve_config

TOML = """
[server]
port = 9000
api_key_env = "MY_SERVE_KEY"

[models.coder]
upstream.base_url = "http://127.0.0.1:8000/v1"
upstream.model = "qwen"
upstream.api_key_env = "UPSTREAM_KEY"
max_turns = 12
temperature = 0.2
egress = "internet"
"""

YAML = """
models:
  coder:
    upstream: {base_url: "https://api.example.com/v1", model: gpt, api_key_file: KEYFILE}
    tool_timeout_seconds: 30
"""


def test_a_toml_file_names_upstream_loop_settings_and_the_client_key(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(TOML)
    config = load_serve_config(path, {"MY_SERVE_KEY": "client-key", "UPSTREAM_KEY": "up-key"})
    assert (config.server.port, config.api_key) == (9000, "client-key")
    coder = config.models["coder"]
    assert (coder.agent.model, coder.agent.base_url, coder.agent.api_key) == (
        "qwen", "http://127.0.0.1:8000/v1", "up-key",
    )  # fmt: skip
    assert (coder.agent.max_turns, coder.agent.temperature) == (12, 0.2)
    assert coder.agent.system_prompt is None  # the paper's prompt
    assert coder.spec.egress == "internet"
    assert config.server.host == "127.0.0.1"  # loopback unless said otherwise


def test_a_yaml_file_reads_the_upstream_key_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("secret\n")
    path = tmp_path / "serve.yaml"
    path.write_text(YAML.replace("KEYFILE", str(tmp_path / "key")))
    config = load_serve_config(path, {})
    assert config.models["coder"].agent.api_key == "secret"
    assert config.models["coder"].agent.tool_timeout_s == 30
    assert config.api_key is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TOML.replace("max_turns = 12", "max_turn = 12"), "models.coder.max_turn"),
        (TOML.replace("max_turns = 12", "max_turns = 0"), "models.coder.max_turns"),
        (TOML.replace("http://127", "ftp://127"), "models.coder.upstream.base_url"),
        (TOML.replace('upstream.model = "qwen"', ""), "models.coder.upstream.model"),
        ("[server]\n", "models"),
        ("not = [valid", "not valid toml"),
    ],
)
def test_every_mistake_names_its_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    with pytest.raises(ServeConfigError, match=message.replace(".", r"\.")):
        load_serve_config(path, {"MY_SERVE_KEY": "k", "UPSTREAM_KEY": "k"})


def test_a_named_key_variable_must_be_set(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(TOML)
    with pytest.raises(ServeConfigError, match="UPSTREAM_KEY is not set"):
        load_serve_config(path, {"MY_SERVE_KEY": "k"})
    with pytest.raises(ServeConfigError, match="MY_SERVE_KEY is not set"):
        load_serve_config(path, {"UPSTREAM_KEY": "k"})


def test_the_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "serve" / "serve.toml"
    config = load_serve_config(example, {})
    assert set(config.models) == {"sandboxed-coder", "sandboxed-coder-online"}
    assert config.models["sandboxed-coder-online"].spec.egress == "internet"
    cluster = load_serve_config(example.with_name("serve-cluster.toml"), {})
    assert cluster.models["sandboxed-coder"].spec.sandbox == "cluster"
    assert (cluster.gateway.namespace, cluster.models["sandboxed-coder"].spec.pool) == (
        "team-a", "warm",
    )  # fmt: skip


CLUSTER = """
[gateway]
address = "gateway.sandfleet-system:50051"
token_env = "SERVE_GATEWAY_TOKEN"
namespace = "team-a"

[models.coder]
upstream.base_url = "http://127.0.0.1:8000/v1"
upstream.model = "qwen"
sandbox = "cluster"
pool = "python"
"""


def test_a_cluster_model_claims_from_a_pool_through_the_named_gateway(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(CLUSTER)
    config = load_serve_config(path, {})
    coder = config.models["coder"].spec
    assert (coder.sandbox, coder.pool, coder.template) == ("cluster", "python", None)
    assert config.gateway.namespace == "team-a"
    target = resolve_target(config.gateway, {"SERVE_GATEWAY_TOKEN": "sa-token"})
    assert (target.address, target.current_token()) == (
        "gateway.sandfleet-system:50051",
        "sa-token",
    )
    with pytest.raises(GatewayConfigError, match=r"gateway\.token_env: SERVE_GATEWAY_TOKEN"):
        resolve_target(config.gateway, {})


def test_backend_kubernetes_moves_every_model_to_the_cluster_and_local_refuses_a_pool(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(TOML)
    config = load_serve_config(
        path, {"MY_SERVE_KEY": "k", "UPSTREAM_KEY": "k"}, backend="kubernetes"
    )
    assert config.models["coder"].spec.sandbox == "cluster"
    path.write_text(CLUSTER)
    with pytest.raises(ServeConfigError, match=r"models\.coder\.pool: only for sandbox"):
        load_serve_config(path, {}, backend="local")
    path.write_text(CLUSTER.replace('pool = "python"', 'pool = "a"\ntemplate = "b"'))
    with pytest.raises(ServeConfigError, match="a pool or a template, not both"):
        load_serve_config(path, {})


def test_a_token_file_is_read_again_on_every_claim(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    path = tmp_path / "serve.toml"
    path.write_text(CLUSTER.replace('token_env = "SERVE_GATEWAY_TOKEN"', f'token_file = "{token}"'))
    target = resolve_target(load_serve_config(path, {}).gateway, {})
    assert target.current_token() == "first"
    token.write_text("rotated\n")
    assert target.current_token() == "rotated"
    token.write_text("")
    with pytest.raises(GatewayConfigError, match="is empty"):
        target.current_token()


def test_client_identity_needs_every_model_on_the_cluster_and_no_key_of_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(
        CLUSTER.replace('namespace = "team-a"', 'namespace = "team-a"\nidentity = "client"')
    )
    config = load_serve_config(path, {"SANDFLEET_SERVE_API_KEY": "ignored"})
    assert (config.gateway.identity, config.api_key) == ("client", None)
    path.write_text(path.read_text().replace('sandbox = "cluster"\npool = "python"\n', ""))
    with pytest.raises(ServeConfigError, match=r"gateway\.identity: .*local: coder"):
        load_serve_config(path, {})
