"""images/build.sh, the one documented way to build the images: the same build for docker,
podman and buildah, names that the chart, the operator and the docs use, and the test
cluster's pipeline (tests/cluster/setup.sh) building through it rather than its own command.

The script runs for real with --dry-run / --print-names (it prints each command it would run);
no image is built here (tests/cluster/test_images.py starts the ones setup.sh built).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from sandfleet.operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "images" / "build.sh"
SETUP = ROOT / "tests" / "cluster" / "setup.sh"
CHART = ROOT / "charts" / "sandfleet"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
BUILDERS = {"docker": "build", "podman": "build", "buildah": "bud"}


def build(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *args], capture_output=True, text=True, timeout=60, check=False
    )


def commands(*args: str) -> list[list[str]]:
    result = build("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")]


def test_docker_podman_and_buildah_get_the_same_build_arguments() -> None:
    per_builder = {}
    for builder, verb in BUILDERS.items():
        runs = commands("--builder", builder, "--registry", "r.example/ml", "--push", "all")
        builds = [run for run in runs if run[1] == verb]
        pushes = [run for run in runs if run[1] == "push"]
        assert {run[0] for run in runs} == {builder}
        assert [push[2] for push in pushes] == [run[run.index("--tag") + 1] for run in builds]
        per_builder[builder] = [run[2:] for run in builds]

    assert per_builder["docker"] == per_builder["podman"] == per_builder["buildah"]


@pytest.mark.parametrize(
    ("image", "dockerfile", "target", "name"),
    [
        ("operator", "operator/Dockerfile", None, f"sandfleet-operator:{VERSION}"),
        ("sandbox", "runtime/Dockerfile", "full", f"sandfleet-sandbox:{VERSION}"),
        ("sandbox-slim", "runtime/Dockerfile", "slim", f"sandfleet-sandbox:{VERSION}-slim"),
    ],
)
def test_each_image_builds_its_dockerfile_stage_under_its_name(
    image: str, dockerfile: str, target: str | None, name: str
) -> None:
    (run,) = commands("--builder", "docker", image)
    options = dict(zip(run[2:-1:2], run[3:-1:2], strict=False))

    assert options["--file"] == str(ROOT / dockerfile)
    assert options["--tag"] == name
    assert options.get("--target") == target
    assert run[-1] == str(ROOT)  # the context is the repository root
    if target is not None:
        assert re.search(rf"^FROM \S+ AS {target}$", (ROOT / dockerfile).read_text(), re.M)


def test_bad_arguments_get_one_line_and_exit_2() -> None:
    for args in (["nonsense"], [], ["--builder", "kaniko", "all"], ["--tag"]):
        result = build(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("images/build.sh:")


def test_the_chart_the_operator_and_the_examples_name_the_images_build_sh_makes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    names = build("--print-names", "operator", "sandbox").stdout.split()

    assert chart["appVersion"] == VERSION  # an empty tag is the appVersion, build.sh's default
    assert names == [
        f"{values['operator']['image']['repository']}:{VERSION}",
        f"{values['sandboxes']['image']['repository']}:{VERSION}",
    ]
    assert values["operator"]["image"]["tag"] == values["sandboxes"]["image"]["tag"] == ""
    assert OperatorSettings.model_fields["default_image"].default == names[1]
    for example in (ROOT / "manifests" / "examples").glob("*.yaml"):
        for image in re.findall(r"image: (\S+)", example.read_text()):
            assert image == names[1], example


def test_the_cluster_pipeline_builds_every_image_through_build_sh() -> None:
    setup = SETUP.read_text()
    body = setup[
        setup.index("build_image() {") : setup.index("\n}\n", setup.index("build_image() {"))
    ]
    built = re.findall(r"^\s+build_image (\S+) ", setup, re.M)

    # No build command of its own: `bud` appears nowhere but through images/build.sh.
    assert not re.search(r"\bbud\b", setup)
    assert '"$REPO/images/build.sh"' in body and "--print-names" in body
    assert sorted(built) == ["operator", "sandbox", "sandbox-slim"]
    for image in built:
        assert build("--print-names", image).returncode == 0


def test_every_build_sh_line_in_the_docs_runs() -> None:
    """Each documented `images/build.sh ...` command parses (run with --dry-run)."""
    documented = []
    docs = (ROOT / "docs" / "operations" / "install.md", CHART / "README.md")
    for doc in (ROOT / "README.md", *docs, ROOT / "manifests" / "README.md"):
        for text in doc.read_text().splitlines():
            command = text.split("#", 1)[0].strip()
            if command.startswith("images/build.sh "):
                documented.append(shlex.split(command)[1:])
    assert len(documented) >= 2

    for args in documented:
        result = build("--dry-run", "--builder", "docker", *args)
        assert result.returncode == 0, (args, result.stderr)
