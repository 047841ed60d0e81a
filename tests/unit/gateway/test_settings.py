"""GatewaySettings from the environment, the session key file, and `sandfleet-gateway`'s
one-line refusal of bad settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.api import GATEWAY_PORT
from sandfleet.api.session_tokens import read_session_key
from sandfleet.gateway.__main__ import EXIT_BAD_SETTINGS, main
from sandfleet.gateway.settings import GatewaySettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("SANDFLEET_GATEWAY_") or name in ("SANDFLEET_LOG_LEVEL", "POD_NAME"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = GatewaySettings()
    assert (settings.host, settings.port, settings.http_port) == ("0.0.0.0", GATEWAY_PORT, 9090)
    assert settings.namespaces == [] and settings.quota_default == 0 and settings.quotas == {}
    assert settings.token_review_ttl_seconds == 5  # below the API server's own 10 s cache
    assert settings.token_review_negative_ttl_seconds == 5
    assert settings.access_review_ttl_seconds == 10
    assert not settings.tls and settings.session_key_file is None
    assert settings.replica  # the host's name


def test_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SANDFLEET_GATEWAY_NAMESPACES", '["team-a", "team-b"]')
    monkeypatch.setenv("SANDFLEET_GATEWAY_QUOTA_DEFAULT", "10")
    monkeypatch.setenv("SANDFLEET_GATEWAY_QUOTAS", '{"team-a": 50}')
    monkeypatch.setenv("SANDFLEET_GATEWAY_TLS_CERT_FILE", str(tmp_path / "tls.crt"))
    monkeypatch.setenv("SANDFLEET_GATEWAY_TLS_KEY_FILE", str(tmp_path / "tls.key"))
    monkeypatch.setenv("SANDFLEET_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("POD_NAME", "sandfleet-gateway-7d9-abcde")
    settings = GatewaySettings()
    assert settings.namespaces == ["team-a", "team-b"]
    assert (settings.quota_default, settings.quotas) == (10, {"team-a": 50})
    assert settings.tls and settings.log_level == "DEBUG"
    assert settings.replica == "sandfleet-gateway-7d9-abcde"


def test_tls_needs_both_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set both tls_cert_file and tls_key_file"):
        GatewaySettings(tls_cert_file=tmp_path / "tls.crt")


def test_quotas_are_not_negative() -> None:
    with pytest.raises(ValueError, match="0 \\(unlimited\\) or more: team-a"):
        GatewaySettings(quotas={"team-a": -1})


def test_the_session_key_is_read_as_the_operator_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"k" * 32 + b"\n")
    assert read_session_key(path) == b"k" * 32
    path.write_bytes(b"short\n")
    with pytest.raises(ValueError, match="too short \\(5 bytes, want 32\\+\\)"):
        read_session_key(path)
    with pytest.raises(ValueError, match="cannot read the session key file"):
        read_session_key(tmp_path / "missing")


def test_bad_settings_exit_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SANDFLEET_GATEWAY_PORT", "not-a-port")
    assert main() == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("sandfleet-gateway: bad settings: SANDFLEET_GATEWAY_PORT: ")


def test_a_missing_session_key_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main() == EXIT_BAD_SETTINGS
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "SANDFLEET_GATEWAY_SESSION_KEY_FILE is not set" in err
