"""The images setup.sh builds, started as real pods: the operator image and the slim sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.probe_pods import operator_image, probe_pod, result_of, run_probe

pytestmark = pytest.mark.cluster

RUNTIME_REQUIREMENTS = Path(__file__).resolve().parents[2] / "runtime" / "requirements.txt"


def _runtime_pins() -> dict[str, str]:
    lines = (
        line.split("#", 1)[0].strip() for line in RUNTIME_REQUIREMENTS.read_text().splitlines()
    )
    return dict(line.split("==") for line in lines if line)


_OPERATOR_SMOKE = """
import importlib.metadata as metadata, json, os, shutil, sys
import kopf
import sandfleet.operator.handlers  # registers every kopf handler, as the entry point does
print("RESULT " + json.dumps({
    "kopf": metadata.version("kopf"),
    "sandfleet": metadata.version("sandfleet"),
    "uid": os.getuid(),
    "entrypoint": shutil.which("sandfleet-operator"),
    "pip": shutil.which("pip") or shutil.which("pip3"),
    "compiler": shutil.which("gcc") or shutil.which("cc"),
    "python": sys.version_info[:2] >= (3, 11),
}))
"""

# Run with the agent's own interpreter: what the agent can import is what this sees.
_AGENT_IMPORTS = """
import importlib.metadata, importlib.util, json, os, shutil, sys
before = set(sys.modules)
import sandfleet_runtime.__main__, sandfleet_runtime.server
loaded = sorted({name.split(".")[0] for name in set(sys.modules) - before})
print("RESULT " + json.dumps({
    "control_plane_installed": importlib.util.find_spec("sandfleet") is not None,
    "loaded": loaded,
    "scripts": sorted(os.listdir(os.path.dirname(sys.executable))),
    "shell_python": shutil.which("python3"),
    "distributions": {d.metadata["Name"].lower().replace("_", "-"): d.version
                      for d in importlib.metadata.distributions()},
    "uid": os.getuid(),
    "cwd": os.getcwd(),
}))
"""


async def test_the_operator_image_runs_kopf_and_the_operator_handlers_as_a_non_root_pod(
    kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest
) -> None:
    image = operator_image(cluster_under_test)
    manifest = probe_pod(
        "operator-smoke", image, _OPERATOR_SMOKE, cluster_under_test.image_pull_policy
    )

    probe = await run_probe(kube, namespace, manifest)

    assert probe.phase == "Succeeded", probe.log
    result = result_of(probe)
    assert result["kopf"].startswith("1.")
    assert result["sandfleet"]
    assert result["uid"] == 65532  # the image's own USER: the pod sets none
    assert result["entrypoint"] == "/opt/sandfleet/bin/sandfleet-operator"
    assert (result["pip"], result["compiler"]) == (None, None)
    assert result["python"] is True


async def test_the_slim_sandbox_image_holds_the_agent_and_no_control_plane_code(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    manifest = probe_pod(
        "agent-imports",
        runtime_image,
        _AGENT_IMPORTS,
        cluster_under_test.image_pull_policy,
        python="/opt/sandfleet/bin/python",
    )

    probe = await run_probe(kube, namespace, manifest)

    assert probe.phase == "Succeeded", probe.log
    result = result_of(probe)
    assert result["control_plane_installed"] is False
    assert "sandfleet" not in result["loaded"]
    assert {"sandfleet_runtime", "sandfleet_proto", "grpc"} <= set(result["loaded"])
    assert "sandfleet-runtime" in result["scripts"]
    assert not {"sandfleet", "sandfleet-operator", "sandfleet-gateway"} & set(result["scripts"])
    # The runtime-only install: the package without its dependencies, then exactly the pins of
    # runtime/requirements.txt (and what they need: grpcio's typing-extensions). No SDK library.
    installed = result["distributions"]
    assert {name: installed.get(name) for name in _runtime_pins()} == _runtime_pins()
    assert set(installed) == {*_runtime_pins(), "sandfleet", "typing-extensions"}
    # The agent's shell sees the image's python, not the agent's venv; uid 1000 in /testbed.
    assert result["shell_python"] == "/usr/bin/python3"
    assert (result["uid"], result["cwd"]) == (1000, "/testbed")
