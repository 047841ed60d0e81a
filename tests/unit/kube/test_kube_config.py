"""KubeConfig from kubeconfig files (inline data, file references, tokens, contexts, merges)
and from a pod's service account directory, all built in tmp_path and read through
kubernetes_asyncio's loaders (exec plugins and OIDC: test_kube_credentials.py)."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandfleet.kube import KubeConfig, KubeConfigError
from sandfleet.kube.credentials import LoadedCredentials

# A throwaway self-signed certificate and its key, made for these tests only (valid to 2126).
CERT_PEM = b"""-----BEGIN CERTIFICATE-----
MIIBlDCCATmgAwIBAgIULBgVEFIKMN1jJTdd76MxTpjEqs8wCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTc2FuZGZsZWV0LXVuaXQtdGVzdDAgFw0yNjExMjIyMzU3NDFa
GA8yMTI2MTAyOTIzNTc0MVowHjEcMBoGA1UEAwwTc2FuZGZsZWV0LXVuaXQtdGVz
dDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABKaUGwWEfmUEUecAGR9oU7qHvuiM
ggpkbm9RdlP4JWPz8u4EyKjiQTsLoo5In6YekRCDw1+F0uzhFoVZJAaEYoqjUzBR
MB0GA1UdDgQWBBSLPpItFXDsDVzWzMtGdhJzBPsInDAfBgNVHSMEGDAWgBSLPpIt
FXDsDVzWzMtGdhJzBPsInDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kA
MEYCIQCgRpG+u8VfyPaKmhL/cctfZVGzA2XMyRS3zZgcwbabeQIhAPMgwzuygSzG
prBZ/JhGsDGXJvktQhacX39CL8/oojMn
-----END CERTIFICATE-----
"""
KEY_PEM = b"""-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg5+VmNvfUmoouhlcd
lPiiIXYRvt65hTkbBL46vlWjL5ChRANCAASmlBsFhH5lBFHnABkfaFO6h77ojIIK
ZG5vUXZT+CVj8/LuBMio4kE7C6KOSJ+mHpEQg8NfhdLs4RaFWSQGhGKK
-----END PRIVATE KEY-----
"""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    *,
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
    contexts: dict[str, dict[str, Any]],
    current: str | None = None,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": c} for n, c in contexts.items()],
    }
    if current is not None:
        document["current-context"] = current
    return document


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def two_contexts() -> dict[str, Any]:
    return kubeconfig(
        clusters={
            "dev": {
                "server": "https://dev.example:6443/",
                "certificate-authority-data": b64(CERT_PEM),
            },
            "prod": {"server": "https://prod.example", "insecure-skip-tls-verify": True},
        },
        users={"alice": {"token": "alice-token"}, "bob": {"token": "bob-token"}},
        contexts={
            "dev": {"cluster": "dev", "user": "alice", "namespace": "team-a"},
            "prod": {"cluster": "prod", "user": "bob"},
        },
        current="dev",
    )


def test_the_current_context_gives_server_token_namespace_and_inline_ca(tmp_path: Path) -> None:
    config = KubeConfig.load(write(tmp_path / "config", two_contexts()))

    assert config.server == "https://dev.example:6443"  # trailing slash dropped
    assert config.bearer_token() == "alice-token"
    assert config.namespace == "team-a"
    assert config.ca_file is not None
    assert Path(config.ca_file).read_bytes() == CERT_PEM  # the library's private copy
    assert config.context == "dev"
    assert not config.insecure_skip_tls_verify


def test_a_named_context_overrides_the_current_one_and_defaults_the_namespace(
    tmp_path: Path,
) -> None:
    config = KubeConfig.load(write(tmp_path / "config", two_contexts()), context="prod")

    assert config.server == "https://prod.example"
    assert config.bearer_token() == "bob-token"
    assert config.namespace == "default"
    assert config.insecure_skip_tls_verify
    assert config.ssl_context().verify_mode == ssl.CERT_NONE


def test_an_unknown_context_is_named_in_the_error(tmp_path: Path) -> None:
    path = write(tmp_path / "config", two_contexts())

    with pytest.raises(KubeConfigError, match="no context named 'staging'"):
        KubeConfig.load(path, context="staging")


def test_a_kubeconfig_without_current_context_needs_a_named_one(tmp_path: Path) -> None:
    document = two_contexts()
    del document["current-context"]
    path = write(tmp_path / "config", document)

    with pytest.raises(KubeConfigError, match="no current-context"):
        KubeConfig.load(path)
    assert KubeConfig.load(path, context="prod").server == "https://prod.example"


def test_inline_client_certificate_data_builds_a_verifying_tls_context(tmp_path: Path) -> None:
    document = kubeconfig(
        clusters={"c": {"server": "https://k:6443", "certificate-authority-data": b64(CERT_PEM)}},
        users={"u": {"client-certificate-data": b64(CERT_PEM), "client-key-data": b64(KEY_PEM)}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    config = KubeConfig.load(write(tmp_path / "config", document))

    assert config.client_cert_file and Path(config.client_cert_file).read_bytes() == CERT_PEM
    assert config.client_key_file and Path(config.client_key_file).read_bytes() == KEY_PEM
    assert config.bearer_token() is None
    context = config.ssl_context()  # loads the chain: fails if the PEM pair were mangled
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "sandfleet-unit-test"),),)
    ]


def test_file_references_are_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    pki = tmp_path / "kube" / "pki"
    pki.mkdir(parents=True)
    (pki / "ca.crt").write_bytes(CERT_PEM)
    (pki / "admin.crt").write_bytes(CERT_PEM)
    (pki / "admin.key").write_bytes(KEY_PEM)
    document = kubeconfig(
        clusters={"c": {"server": "https://k:6443", "certificate-authority": "pki/ca.crt"}},
        users={
            "u": {
                "client-certificate": "pki/admin.crt",
                "client-key": str(pki / "admin.key"),  # absolute paths stay as they are
            }
        },
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    config = KubeConfig.load(write(tmp_path / "kube" / "config", document))

    assert config.ca_file == str(pki / "ca.crt")
    assert config.client_cert_file == str(pki / "admin.crt")
    assert config.client_key_file == str(pki / "admin.key")
    config.ssl_context()


def test_a_missing_referenced_file_is_named_in_the_error(tmp_path: Path) -> None:
    document = kubeconfig(
        clusters={"c": {"server": "https://k", "certificate-authority": "nowhere/ca.crt"}},
        users={"u": {"token": "t"}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )

    with pytest.raises(KubeConfigError, match=r"context 'x': .*nowhere/ca\.crt"):
        KubeConfig.load(write(tmp_path / "config", document))


def test_a_token_file_is_read_again_after_it_rotates(tmp_path: Path) -> None:
    """Like client-go, a tokenFile is cached for a period (reread_period_s, a minute) and
    read again after it or at once after a 401 (refresh=True)."""
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    document = kubeconfig(
        clusters={"c": {"server": "https://k"}},
        users={"u": {"tokenFile": "token"}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    config = KubeConfig.load(write(tmp_path / "config", document))
    assert config.bearer_token() == "first-token"  # stripped of its newline

    # kubelet rotates projected tokens by writing a new file and renaming it into place.
    replacement = tmp_path / "token.new"
    replacement.write_text("second-token-longer\n")
    os.replace(replacement, token_file)

    assert config.bearer_token() == "first-token"  # within the period: not read again
    assert config.bearer_token(refresh=True) == "second-token-longer"  # what a 401 does
    token_file.write_text("third-token")
    assert isinstance(config.auth, LoadedCredentials)
    config.auth.reread_period_s = 0.0  # the period has passed
    assert config.bearer_token() == "third-token"


def test_an_inline_token_wins_over_a_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    document = kubeconfig(
        clusters={"c": {"server": "https://k"}},
        users={"u": {"token": "inline", "tokenFile": "token"}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )

    assert KubeConfig.load(write(tmp_path / "config", document)).bearer_token() == "inline"


def test_kubeconfig_env_files_merge_with_the_first_definition_winning(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a.yaml",
        kubeconfig(
            clusters={"shared": {"server": "https://first"}},
            users={"u": {"token": "first-token"}},
            contexts={"one": {"cluster": "shared", "user": "u"}},
            current="two",
        ),
    )
    second = write(
        tmp_path / "b.yaml",
        kubeconfig(
            clusters={"shared": {"server": "https://second"}},
            users={"u": {"token": "second-token"}},
            contexts={"two": {"cluster": "shared", "user": "u", "namespace": "ns2"}},
            current="one",
        ),
    )
    listed = os.pathsep.join([str(first), str(tmp_path / "missing.yaml"), str(second)])

    config = KubeConfig.load(environ={"KUBECONFIG": listed})

    assert config.context == "two"  # current-context from the first file that sets it
    assert config.server == "https://first"
    assert config.bearer_token() == "first-token"
    assert config.namespace == "ns2"


def test_without_kubeconfig_env_the_home_config_is_used(tmp_path: Path) -> None:
    write(tmp_path / ".kube" / "config", two_contexts())

    config = KubeConfig.load(environ={"HOME": str(tmp_path)})

    assert config.server == "https://dev.example:6443"


def test_with_no_configuration_anywhere_the_error_says_what_was_tried(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"KUBECONFIG is unset.*KUBERNETES_SERVICE_HOST"):
        KubeConfig.load(environ={"HOME": str(tmp_path)})


def service_account_dir(root: Path, *, namespace: str | None = "sandfleet-system") -> Path:
    directory = root / "var" / "run" / "secrets" / "kubernetes.io" / "serviceaccount"
    directory.mkdir(parents=True)
    (directory / "token").write_text("sa-token-1")
    (directory / "ca.crt").write_bytes(CERT_PEM)
    if namespace is not None:
        (directory / "namespace").write_text(namespace)
    return directory


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_reads_the_service_account_directory(tmp_path: Path) -> None:
    directory = service_account_dir(tmp_path)

    config = KubeConfig.in_cluster(directory, environ=IN_CLUSTER_ENV)

    assert config.server == "https://10.96.0.1:443"
    assert config.namespace == "sandfleet-system"
    assert config.ca_file == str(directory / "ca.crt")
    assert config.bearer_token() == "sa-token-1"
    (directory / "token").write_text("sa-token-2-rotated")
    assert config.bearer_token(refresh=True) == "sa-token-2-rotated"


def test_in_cluster_brackets_an_ipv6_service_host_and_defaults_the_namespace(
    tmp_path: Path,
) -> None:
    directory = service_account_dir(tmp_path, namespace=None)
    env = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "6443"}

    config = KubeConfig.in_cluster(directory, environ=env)

    assert config.server == "https://[fd00:10:96::1]:6443"
    assert config.namespace == "default"


def test_in_cluster_outside_a_pod_says_so(tmp_path: Path) -> None:
    directory = service_account_dir(tmp_path)

    with pytest.raises(KubeConfigError, match="service account: Service host/port is not set"):
        KubeConfig.in_cluster(directory, environ={})
    with pytest.raises(KubeConfigError, match="Service token file does not exist"):
        KubeConfig.in_cluster(tmp_path / "elsewhere", environ=IN_CLUSTER_ENV)


def test_load_falls_back_to_in_cluster_when_no_kubeconfig_exists(tmp_path: Path) -> None:
    directory = service_account_dir(tmp_path)
    env = {"HOME": str(tmp_path / "home"), **IN_CLUSTER_ENV}

    config = KubeConfig.load(environ=env, service_account_dir=directory)

    assert config.server == "https://10.96.0.1:443"
    assert config.bearer_token() == "sa-token-1"


def test_a_missing_kubeconfig_file_or_a_broken_one_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"kubeconfig .*nowhere\.yaml does not exist"):
        KubeConfig.load(tmp_path / "nowhere.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeConfigError, match="cannot read the kubeconfig") as caught:
        KubeConfig.load(broken)
    assert "\n" not in str(caught.value)


def test_the_gateway_extension_of_the_context_cluster_is_kept(tmp_path: Path) -> None:
    document = two_contexts()
    document["clusters"][0]["cluster"]["extensions"] = [
        {"name": "sandfleet.dev/gateway", "extension": {"address": "gw.example:443"}}
    ]
    path = write(tmp_path / "config", document)

    assert KubeConfig.load(path).cluster_extensions == {
        "sandfleet.dev/gateway": {"address": "gw.example:443"}
    }
    assert KubeConfig.load(path, context="prod").cluster_extensions == {}
