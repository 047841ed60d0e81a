"""The agent package's exports load lazily: the CLI starts without importing the openai SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sandfleet.agent


def _python(code: str) -> str:
    # A fresh interpreter: this one has imported openai long ago (other tests use it).
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_building_the_cli_and_using_the_loop_types_leaves_openai_unimported() -> None:
    code = (
        "import sys\n"
        "from sandfleet.cli.main import build_parser\n"
        "build_parser()\n"
        "from sandfleet.agent import AgentConfig, Task, execute_tool_call, run_agent\n"
        "print('openai' in sys.modules)\n"
    )
    assert _python(code) == "False"


def test_creating_a_model_imports_openai() -> None:
    code = (
        "import sys\n"
        "from sandfleet.agent import AgentConfig, OpenAIChatModel, openai_model\n"
        "model = openai_model(AgentConfig(model='m', base_url='http://127.0.0.1:9/v1'))\n"
        "print(isinstance(model, OpenAIChatModel), 'openai' in sys.modules)\n"
    )
    assert _python(code) == "True True"


def test_every_export_resolves_and_unknown_names_raise() -> None:
    for name in sandfleet.agent.__all__:
        assert getattr(sandfleet.agent, name) is not None, name
    assert set(sandfleet.agent.__all__) <= set(dir(sandfleet.agent))
    with pytest.raises(AttributeError, match="no_such_export"):
        sandfleet.agent.no_such_export  # noqa: B018  (the lookup is the test)
