"""manifests/install/sandfleet.yaml, the plain-manifest install, is the chart's own rendering:
render.sh run again with the real helm binary gives the checked-in file byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.cluster.harness.helm_cli import Helm

ROOT = Path(__file__).resolve().parents[3]
INSTALL = ROOT / "manifests" / "install"
RENDERED = INSTALL / "sandfleet.yaml"
SESSION_KEY_SECRET = "sandfleet-session-key"


def _render(helm: Helm) -> str:
    result = subprocess.run(
        ["bash", str(INSTALL / "render.sh"), "--stdout"],
        env={**os.environ, "HELM": str(helm.binary), "HOME": str(helm.home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_checked_in_install_is_what_the_chart_renders_now(helm: Helm) -> None:
    assert RENDERED.read_text() == _render(helm), (
        "manifests/install/sandfleet.yaml is stale: run "
        "HELM=~/.cache/sandfleet/cluster/bin/helm-*/helm bash manifests/install/render.sh"
    )


def test_the_install_runs_the_operator_and_the_gateway_with_a_session_key_made_by_hand() -> None:
    documents = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    deployments = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}

    assert set(deployments) == {"sandfleet-operator", "sandfleet-gateway"}
    assert ("Service", "sandfleet-operator") in kinds and ("Service", "sandfleet-gateway") in kinds
    # Nothing random (the chart's generated key) and no helm hook (kubectl would apply it).
    assert not any(d["kind"] == "Secret" for d in documents)
    assert not any("helm.sh/hook" in d["metadata"].get("annotations", {}) for d in documents)
    assert not any(d["kind"] == "CustomResourceDefinition" for d in documents)
    for deployment in deployments.values():
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
        assert SESSION_KEY_SECRET in secrets, deployment["metadata"]["name"]
    # manifests/README.md tells the reader to create exactly that Secret.
    readme = (ROOT / "manifests" / "README.md").read_text()
    assert f"create secret generic {SESSION_KEY_SECRET}" in readme


def test_the_documented_sed_points_every_image_at_the_registry() -> None:
    """The README's `sed` line, run on the install: no image is left without the registry."""
    readme = (ROOT / "manifests" / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if line.startswith('sed "s|image:')]
    expression = line.split('"')[1:-1]
    script = '"'.join(expression).replace('\\"', '"')
    result = subprocess.run(
        ["sed", script, str(RENDERED)], capture_output=True, text=True, check=True, timeout=30
    )
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    images = [
        container["image"]
        for d in documents
        if d["kind"] == "Deployment"
        for container in d["spec"]["template"]["spec"]["containers"]
    ]
    (config,) = [
        d
        for d in documents
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "sandfleet-operator"
    ]

    assert images and all(
        i.startswith("registry.example.com/ml/sandfleet-operator:") for i in images
    )
    assert config["data"]["SANDFLEET_OPERATOR_DEFAULT_IMAGE"] == (
        "registry.example.com/ml/sandfleet-sandbox:0.1.0"
    )
