"""Where the gateway is and whose token goes to it: argument, environment, kubeconfig, errors."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandfleet.clients.gateway.target import GATEWAY_EXTENSION, resolve_gateway
from sandfleet.errors import GatewayConfigError
from sandfleet.kube import credentials
from tests.support.kube_exec_plugin import ExecPlugin

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"


def kubeconfig(
    tmp_path: Path,
    *,
    extension: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    namespace: str = "team-a",
) -> Path:
    cluster: dict[str, Any] = {"server": "https://api.example:6443"}
    if extension is not None:
        cluster["extensions"] = [
            {"name": "something.else/x", "extension": {"address": "wrong:1"}},
            {"name": GATEWAY_EXTENSION, "extension": extension},
        ]
    document = {
        "current-context": "ctx",
        "contexts": [
            {"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": namespace}}
        ],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "kube-token"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


def environ(tmp_path: Path, **values: str) -> dict[str, str]:
    """No KUBECONFIG and an empty home: only what a test sets is there."""
    return {"HOME": str(tmp_path / "home"), **values}


def test_an_explicit_address_and_token_need_no_kubeconfig(tmp_path: Path) -> None:
    target = resolve_gateway("gw.example:50052", token="t", environ=environ(tmp_path))
    assert (target.address, target.token, target.tls, target.namespace) == (
        "gw.example:50052", "t", None, "default",
    )  # fmt: skip
    assert target.source == "argument"


def test_the_environment_gives_address_tls_ca_and_token(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    env = environ(
        tmp_path,
        SANDFLEET_GATEWAY="gw.example:8443",
        SANDFLEET_GATEWAY_TLS="1",
        SANDFLEET_GATEWAY_CA_FILE=str(ca),
        SANDFLEET_GATEWAY_TOKEN="env-token",
    )
    target = resolve_gateway(environ=env, kubeconfig=kubeconfig(tmp_path))
    assert (target.address, target.token, target.source) == (
        "gw.example:8443", "env-token", "SANDFLEET_GATEWAY",
    )  # fmt: skip
    assert target.tls is not None and target.tls.root_certificates == PEM.encode()
    assert target.namespace == "team-a"  # still the kubeconfig context's


@pytest.mark.parametrize(
    ("given", "address", "tls"),
    [
        ("https://gw.example", "gw.example:443", True),
        ("grpcs://gw.example:9443/", "gw.example:9443", True),
        ("grpc://gw.example", "gw.example:50052", False),
        ("gw.example", "gw.example:50052", False),
        ("10.0.0.7:50052", "10.0.0.7:50052", False),
    ],
)
def test_a_scheme_prefix_picks_tls_and_a_bare_host_gets_a_port(
    tmp_path: Path, given: str, address: str, tls: bool
) -> None:
    target = resolve_gateway(given, token="t", environ=environ(tmp_path))
    assert target.address == address
    assert (target.tls is not None) == tls
    if tls:
        assert target.tls is not None and target.tls.root_certificates is None  # system roots


def test_the_argument_wins_over_the_environment_and_the_kubeconfig(tmp_path: Path) -> None:
    env = environ(tmp_path, SANDFLEET_GATEWAY="env:1")
    path = kubeconfig(tmp_path, extension={"address": "kube:2"})
    assert resolve_gateway("arg:3", environ=env, kubeconfig=path).address == "arg:3"
    assert resolve_gateway(environ=env, kubeconfig=path).address == "env:1"


def test_the_kubeconfig_extension_and_the_contexts_token(tmp_path: Path) -> None:
    encoded = base64.b64encode(PEM.encode()).decode()
    path = kubeconfig(tmp_path, extension={"address": "gw.prod:443", "tls": True, "ca": encoded})
    target = resolve_gateway(environ=environ(tmp_path), kubeconfig=path)
    assert (target.address, target.token, target.source) == (
        "gw.prod:443",
        "kube-token",
        "kubeconfig",
    )
    assert target.tls is not None and target.tls.root_certificates == PEM.encode()

    inline = kubeconfig(tmp_path, extension={"address": "gw.prod", "tls": True, "ca": PEM})
    again = resolve_gateway(environ=environ(tmp_path), kubeconfig=inline)
    assert again.address == "gw.prod:443"
    assert again.tls is not None and again.tls.root_certificates == PEM.encode() + b"\n"


def test_a_token_file_of_the_kubeconfig_user_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Token files are read again each minute (as client-go does): here every call is later.
    monkeypatch.setattr(credentials, "REREAD_PERIOD_S", 0.0)
    token_file = tmp_path / "sa-token"
    token_file.write_text("from-file\n")
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user={"tokenFile": str(token_file)})
    target = resolve_gateway(environ=environ(tmp_path), kubeconfig=path)
    assert target.token == target.current_token() == "from-file"
    # A projected token rotates under a long batch: each claim sends the file's latest.
    rotated = tmp_path / "sa-token.new"
    rotated.write_text("rotated\n")
    rotated.replace(token_file)
    assert target.current_token() == "rotated"
    explicit = resolve_gateway(token="given", environ=environ(tmp_path), kubeconfig=path)
    assert explicit.current_token() == "given"


def test_an_exec_plugin_user_gets_the_plugins_token_and_its_renewals(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path)
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user=plugin.user())

    target = resolve_gateway(environ=environ(tmp_path), kubeconfig=path)

    assert target.token == target.current_token() == "exec-token-1"
    assert plugin.runs == 1  # valid for an hour: each claim reuses it
    plugin.set("token", "renewed")
    plugin.set("expires_in", 3600)
    assert target.current_token() == "exec-token-1"


def test_an_exec_plugin_token_near_expiry_is_renewed_for_the_next_claim(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path)
    plugin.set("expires_in", 1)
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user=plugin.user())

    target = resolve_gateway(environ=environ(tmp_path), kubeconfig=path)
    plugin.set("token", "renewed")

    assert target.current_token() == "renewed"


def test_a_failing_exec_plugin_is_named_when_the_gateway_needs_its_token(tmp_path: Path) -> None:
    plugin = ExecPlugin(tmp_path)
    plugin.set("mode", "fail")
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user=plugin.user())

    with pytest.raises(GatewayConfigError, match="the token service said no"):
        resolve_gateway("gw:1", environ=environ(tmp_path), kubeconfig=path)


def test_no_address_anywhere_names_the_three_ways(tmp_path: Path) -> None:
    with pytest.raises(GatewayConfigError) as raised:
        resolve_gateway(environ=environ(tmp_path), kubeconfig=kubeconfig(tmp_path))
    message = str(raised.value)
    for way in ("--gateway", "SANDFLEET_GATEWAY", GATEWAY_EXTENSION):
        assert way in message


def test_a_client_certificate_user_is_told_to_create_a_token(tmp_path: Path) -> None:
    cert = base64.b64encode(b"cert").decode()
    user = {"client-certificate-data": cert, "client-key-data": cert}
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user=user)
    with pytest.raises(GatewayConfigError) as raised:
        resolve_gateway(environ=environ(tmp_path), kubeconfig=path)
    message = str(raised.value)
    assert "client certificate, which cannot be forwarded" in message
    assert "kubectl create token" in message and "SANDFLEET_GATEWAY_TOKEN" in message


def test_without_kubeconfig_the_token_must_be_given(tmp_path: Path) -> None:
    with pytest.raises(
        GatewayConfigError, match="no token for the gateway: set SANDFLEET_GATEWAY_TOKEN"
    ):
        resolve_gateway("gw:1", environ=environ(tmp_path))


def test_an_unreadable_ca_file_is_a_config_error(tmp_path: Path) -> None:
    env = environ(tmp_path, SANDFLEET_GATEWAY_CA_FILE=str(tmp_path / "absent.pem"))
    with pytest.raises(GatewayConfigError, match="cannot read the gateway CA bundle"):
        resolve_gateway("gw:1", token="t", environ=env)


async def test_token_now_reads_a_rotating_token_from_its_source_and_a_fixed_one_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credentials, "REREAD_PERIOD_S", 0.0)
    token_file = tmp_path / "sa-token"
    token_file.write_text("first\n")
    path = kubeconfig(tmp_path, extension={"address": "gw:1"}, user={"tokenFile": str(token_file)})
    rotating = resolve_gateway(environ=environ(tmp_path), kubeconfig=path)
    fixed = resolve_gateway(token="given", environ=environ(tmp_path), kubeconfig=path)

    token_file.write_text("second\n")

    assert await rotating.token_now() == "second"
    assert fixed.token_source is None
    assert await fixed.token_now() == "given"
