"""The two Dockerfiles and what the test pipeline builds from them, read as files.

The slim sandbox image must be built from the runtime, the stubs and pyproject alone (so a
control-plane edit never rebuilds it, and no control-plane code runs next to the model), and
the agent's own code must not import the control plane at all.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUNTIME_DOCKERFILE = ROOT / "runtime" / "Dockerfile"
OPERATOR_DOCKERFILE = ROOT / "operator" / "Dockerfile"
SETUP = ROOT / "tests" / "cluster" / "setup.sh"
AGENT_SOURCES = {
    "pyproject.toml",
    "runtime/requirements.txt",
    "runtime/sandfleet_runtime",
    "proto/sandfleet_proto",
}
OCI_LABELS = ("title", "source", "licenses", "version", "revision")


@dataclasses.dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]]

    def arguments(self, keyword: str) -> list[str]:
        return [rest for word, rest in self.instructions if word == keyword]


def _stages(dockerfile: Path) -> tuple[list[str], list[Stage]]:
    """(instructions before the first FROM, the stages), continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    preamble: list[str] = []
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(name.strip() or str(len(stages)), base.strip(), []))
        elif stages:
            stages[-1].instructions.append((word.upper(), rest.strip()))
        else:
            preamble.append(line)
    return preamble, stages


def _copied_from_context(stage: Stage) -> set[str]:
    sources = set()
    for arguments in stage.arguments("COPY"):
        if "--from=" in arguments:
            continue
        *copied, _destination = arguments.split()
        sources.update(copied)
    return sources


def _stage(stages: list[Stage], name: str) -> Stage:
    (found,) = [stage for stage in stages if stage.name == name]
    return found


def _setup_sources(variable: str) -> list[str]:
    match = re.search(rf"^{variable}=\((.*?)\)", SETUP.read_text(), re.M | re.S)
    assert match is not None, variable
    return match.group(1).split()


def test_the_slim_sandbox_image_is_built_from_the_runtime_stubs_and_pyproject_only() -> None:
    _, stages = _stages(RUNTIME_DOCKERFILE)
    slim = _stage(stages, "slim")
    agent = _stage(stages, "agent")

    assert _copied_from_context(agent) == AGENT_SOURCES
    assert _copied_from_context(slim) == set()
    assert slim.arguments("COPY") == ["--from=agent /opt/sandfleet /opt/sandfleet"]
    assert slim.base == agent.base == "${BASE_IMAGE}"


def test_the_pipeline_keys_the_sandbox_image_by_exactly_what_it_is_built_from() -> None:
    runtime_sources = _setup_sources("RUNTIME_SOURCES")
    operator_sources = _setup_sources("OPERATOR_SOURCES")

    assert set(runtime_sources) == AGENT_SOURCES | {"runtime/Dockerfile", "images/build.sh"}
    assert {"operator/Dockerfile", "operator/sandfleet", "images/build.sh"} <= set(operator_sources)
    # The operator image installs the package with its dependencies, not the runtime's pins.
    assert set(operator_sources) >= AGENT_SOURCES - {"runtime/requirements.txt"}


def test_the_sandbox_image_installs_the_runtime_only_the_wheel_without_its_dependencies() -> None:
    """The base dependencies are the SDK's and the CLI's; the image takes the package with
    --no-deps and then exactly the runtime's pinned requirements."""
    _, stages = _stages(RUNTIME_DOCKERFILE)
    (install,) = [run for run in _stage(stages, "agent").arguments("RUN") if "pip install" in run]

    commands = [part.strip() for part in install.split("&&")]
    assert any(
        c.endswith("pip install --no-cache-dir --disable-pip-version-check --no-deps .")
        for c in commands
    )
    assert any(c.endswith("-r runtime/requirements.txt") for c in commands)
    assert not any("[" in c for c in commands if "pip install" in c)  # no extra


def test_the_agent_code_imports_nothing_from_the_control_plane() -> None:
    offenders = []
    for package in (ROOT / "runtime" / "sandfleet_runtime", ROOT / "proto" / "sandfleet_proto"):
        for module in package.rglob("*.py"):
            for node in ast.walk(ast.parse(module.read_text(), str(module))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                offenders += [
                    f"{module.relative_to(ROOT)}: {name}"
                    for name in names
                    if name == "sandfleet" or name.startswith("sandfleet.")
                ]
    assert offenders == []


def test_the_full_sandbox_image_is_the_default_target_and_keeps_the_agent_entrypoint() -> None:
    _, stages = _stages(RUNTIME_DOCKERFILE)
    full, slim = stages[-1], _stage(stages, "slim")

    assert (full.name, full.base) == ("full", "slim")
    # The model's Python environment goes on PATH; the agent's venv never does.
    (env,) = full.arguments("ENV")
    path = re.search(r"PATH=(\S+)", env)
    assert path is not None and path.group(1).startswith("/opt/python/bin:")
    assert "/opt/sandfleet" not in path.group(1)
    assert full.arguments("USER")[-1] == "1000:1000"
    (entrypoint,) = slim.arguments("ENTRYPOINT")
    assert json.loads(entrypoint)[:1] == ["/opt/sandfleet/bin/sandfleet-runtime"]
    assert slim.arguments("USER") == ["1000:1000"]


def test_both_images_take_the_base_as_an_argument_and_carry_oci_labels() -> None:
    for dockerfile, final in ((RUNTIME_DOCKERFILE, "slim"), (OPERATOR_DOCKERFILE, None)):
        preamble, stages = _stages(dockerfile)
        stage = stages[-1] if final is None else _stage(stages, final)
        labels = " ".join(stage.arguments("LABEL"))

        assert any(line.startswith("ARG BASE_IMAGE=") for line in preamble), dockerfile
        assert all(s.base in ("${BASE_IMAGE}", "slim") for s in stages), dockerfile
        for label in OCI_LABELS:
            assert f"org.opencontainers.image.{label}=" in labels, (dockerfile, label)


def test_the_operator_image_runs_its_console_script_as_a_non_root_user_without_pip() -> None:
    _, stages = _stages(OPERATOR_DOCKERFILE)
    final = stages[-1]

    (entrypoint,) = final.arguments("ENTRYPOINT")
    assert json.loads(entrypoint) == ["/opt/sandfleet/bin/sandfleet-operator"]
    assert final.arguments("USER") == ["65532:65532"]
    assert final.arguments("EXPOSE") == [
        "8080 8081 50052 9090"
    ]  # + the gateway's gRPC and HTTP ports
    assert _copied_from_context(final) == set()  # only the built venv, from the build stage
    assert any("pip uninstall" in run for run in final.arguments("RUN"))
