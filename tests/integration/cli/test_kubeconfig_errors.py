"""A kubeconfig the CLI cannot use is one `error:` line and exit 2, never a traceback: the
real console script with real kubeconfig files and a real exec plugin that fails. Nothing
listens at the addresses named: every case ends before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli
from tests.support.kube_exec_plugin import ExecPlugin, write_kubeconfig

pytestmark = pytest.mark.integration

MODEL = ("--model", "m", "--base-url", "http://127.0.0.1:9/v1")


@pytest.fixture
def failing_plugin_kubeconfig(tmp_path: Path) -> Path:
    plugin = ExecPlugin(tmp_path)
    plugin.set("mode", "fail")
    return write_kubeconfig(tmp_path / "config", server="https://127.0.0.1:9", user=plugin.user())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("trajectory", "s1", "--kubeconfig", "{missing}"),
            "error: no usable Kubernetes configuration: the kubeconfig {missing} does not exist",
        ),
        (
            ("trajectory", "s1", "--kubeconfig", "{plugin}"),
            "error: no usable Kubernetes configuration: kubeconfig context 'test': "
            "exec: process returned 3. the token service said no",
        ),
        (
            (
                "run",
                "--backend",
                "kubernetes",
                "--gateway",
                "127.0.0.1:9",
                "--kubeconfig",
                "{plugin}",
                *MODEL,
                "hi",
            ),
            "the kubeconfig cannot give one: kubeconfig context 'test': "
            "exec: process returned 3. the token service said no",
        ),
        (
            (
                "run",
                "--backend",
                "kubernetes",
                "--gateway",
                "127.0.0.1:9",
                "--kubeconfig",
                "{plugin}",
                "--context",
                "prod",
                *MODEL,
                "hi",
            ),
            "has no context named 'prod'; it has ['test']",
        ),
    ],
    ids=["missing-file", "trajectory-plugin-fails", "run-plugin-fails", "unknown-context"],
)
async def test_an_unusable_kubeconfig_exits_2_with_one_line(
    tmp_path: Path, failing_plugin_kubeconfig: Path, args: tuple[str, ...], message: str
) -> None:
    names = {"missing": str(tmp_path / "nowhere.yaml"), "plugin": str(failing_plugin_kubeconfig)}
    argv = [arg.format(**names) for arg in args]

    result = await run_cli(*argv, env=cli_environment(tmp_path / "home"), cwd=tmp_path)

    assert result.returncode == 2, result
    assert message.format(**names) in result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, result
