"""`run` and `batch` on the kubernetes backend: the gateway flags, --managed, and the one-line
usage error (exit 2) when no gateway is configured. No cluster and no gateway are needed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandfleet.cli.execution import ConfigurationError, agent_config
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.main import build_parser, main, settings_from_arguments
from sandfleet.settings import Settings


def test_the_gateway_flags_reach_the_settings(tmp_path: Path) -> None:
    for command in (["run", "Say hi."], ["batch", "tasks.jsonl", "--out", "r.jsonl"]):
        args = build_parser().parse_args(
            [*command, "--backend", "kubernetes", "--gateway", "gw.example:443",
             "-n", "agents", "--template", "py312", "--context", "prod"]
        )  # fmt: skip
        settings = settings_from_arguments(args, {"HOME": str(tmp_path)})
        assert (settings.backend, settings.gateway, settings.namespace) == (
            "kubernetes", "gw.example:443", "agents",
        )  # fmt: skip
        assert (settings.template, settings.context, settings.managed) == (
            "py312", "prod", False,
        )  # fmt: skip


def test_the_gateway_and_managed_come_from_the_environment_too(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "Say hi."])
    environ = {"HOME": str(tmp_path), "SANDFLEET_GATEWAY": "gw:1", "SANDFLEET_MANAGED": "1"}
    settings = settings_from_arguments(args, environ)
    assert (settings.gateway, settings.managed) == ("gw:1", True)
    flagged = build_parser().parse_args(["run", "Say hi.", "--managed"])
    assert settings_from_arguments(flagged, {"HOME": str(tmp_path)}).managed is True


def test_batch_takes_no_managed_session_flags() -> None:
    for flag in (["--managed"], ["--api-key-secret", "k"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["batch", "t.jsonl", "--out", "r.jsonl", *flag])


def test_the_loop_runs_here_through_the_gateway_so_it_needs_a_key_unless_managed(
    tmp_path: Path,
) -> None:
    def settings_for(*flags: str) -> Settings:
        args = build_parser().parse_args(["run", "hi", "--model", "m", *flags])
        return settings_from_arguments(args, {"HOME": str(tmp_path)})

    with pytest.raises(ConfigurationError, match="no API key for the OpenAI API"):
        agent_config(settings_for("--backend", "kubernetes"))
    assert agent_config(settings_for("--backend", "kubernetes", "--managed")).api_key is None


@pytest.fixture
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No kubeconfig, no gateway settings, no config file: nothing says where a gateway is."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "SANDFLEET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("SANDFLEET_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_run_without_a_gateway_is_a_one_line_usage_error(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["run", "Say hi.", "--backend", "kubernetes", "--model", "m",
         "--base-url", "http://127.0.0.1:9/v1", "--results-dir", str(clean_environment / "r")]
    )  # fmt: skip

    assert code == ExitCode.USAGE == 2
    line = one_error_line(capsys)
    assert line.startswith("error: no sandfleet gateway is configured")
    assert "--gateway" in line and "SANDFLEET_GATEWAY" in line
    assert not (clean_environment / "r").exists()  # nothing ran


def test_batch_without_a_gateway_is_a_one_line_usage_error(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = clean_environment / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "p"}) + "\n")
    code = main(
        ["batch", str(tasks), "--out", str(clean_environment / "out.jsonl"),
         "--backend", "kubernetes", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    )  # fmt: skip

    assert code == ExitCode.USAGE
    assert one_error_line(capsys).startswith("error: no sandfleet gateway is configured")
    assert not (clean_environment / "out.jsonl").exists()


def test_a_gateway_without_a_token_is_a_usage_error_too(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["run", "Say hi.", "--backend", "kubernetes", "--gateway", "127.0.0.1:9",
         "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    )  # fmt: skip

    assert code == ExitCode.USAGE
    assert "no token for the gateway: set SANDFLEET_GATEWAY_TOKEN" in one_error_line(capsys)


def test_managed_needs_the_kubernetes_backend(
    clean_environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "Say hi.", "--managed", "--model", "m", "--base-url", "http://x/v1"])
    assert code == ExitCode.USAGE
    assert one_error_line(capsys) == "error: --managed needs --backend kubernetes"
