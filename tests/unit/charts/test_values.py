"""values.yaml is fully documented, and values.schema.json knows every key and no other."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness.helm_cli import CHART_DIR, Helm, HelmError, ci_values_files

VALUES_PATH = CHART_DIR / "values.yaml"
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
VALUES = yaml.safe_load(VALUES_PATH.read_text())
UNKNOWN = "notAValue"
PASS_THROUGH = {
    "/global",
    *(f"/{part}/{key}" for part in ("operator", "gateway")
      for key in ("affinity", "extraEnv/*", "tolerations/*")),
    "/operator/networkPolicy/modelEgress/*",
    "/snapshots/s3/egress/*",
    "/serve/env/*",
    "/serve/networkPolicy/upstreamEgress/*",
    "/serve/models",
}  # fmt: skip
"""Kubernetes objects handed to the API server unchanged (it validates them), and serve's
models, which its own strict config check reads (tests/unit/charts/test_serve.py renders
them and loads the result): the only object nodes of the schema that accept keys it does not
name."""
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(\s|$)")


def _schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every object schema, with its path ('*' for array items)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if node.get("type") == "object":
        found.append((path or "/", node))
    for key, child in node.get("properties", {}).items():
        found += _schema_nodes(child, f"{path}/{key}")
    if isinstance(node.get("items"), dict):
        found += _schema_nodes(node["items"], f"{path}/*")
    return found


def test_every_key_in_values_yaml_has_a_doc_comment() -> None:
    lines = VALUES_PATH.read_text().splitlines()
    undocumented = []
    for number, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        comment: list[str] = []
        above = number - 1
        while above >= 0 and lines[above].strip().startswith("#"):
            comment.insert(0, lines[above])
            above -= 1
        doc = [c for c in comment if c.startswith(f"{match['indent']}# -- ")]
        if not doc or len(doc[0].strip()) <= len("# -- "):
            undocumented.append(f"line {number + 1}: {line.strip()}")
    assert not undocumented, "values without a `# --` comment:\n" + "\n".join(undocumented)


def test_every_object_in_the_schema_rejects_keys_it_does_not_name() -> None:
    loose = []
    for path, node in _schema_nodes(SCHEMA):
        extra = node.get("additionalProperties")
        if path in PASS_THROUGH:
            assert extra is True, path
        elif "properties" in node:
            if extra is not False:
                loose.append(path)
        elif not (isinstance(extra, dict) and extra.get("type") in {"string", "integer"}):
            loose.append(f"{path} (neither a declared object nor a string or integer map)")
    assert not loose, "schema objects that accept unknown keys: " + ", ".join(loose)


def _value_paths(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths of values.yaml's keys that the schema fails to declare."""
    missing: list[str] = []
    if not isinstance(value, dict) or "properties" not in schema:
        return missing
    for key, child in value.items():
        if key not in schema["properties"]:
            missing.append(f"{path}/{key}")
        else:
            missing += _value_paths(child, schema["properties"][key], f"{path}/{key}")
    return missing


def _schema_paths(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Paths the schema declares that values.yaml has no default (and no doc) for."""
    missing: list[str] = []
    for key, child in schema.get("properties", {}).items():
        if f"{path}/{key}" in PASS_THROUGH:
            continue
        if not isinstance(value, dict) or key not in value:
            missing.append(f"{path}/{key}")
        else:
            missing += _schema_paths(child, value[key], f"{path}/{key}")
    return missing


def test_values_yaml_and_the_schema_declare_the_same_keys() -> None:
    assert _value_paths(VALUES, SCHEMA) == []
    assert _schema_paths(SCHEMA, VALUES) == []


def _with_unknown_keys(value: Any, schema: dict[str, Any], path: str, paths: list[str]) -> Any:
    """A copy of `value` with an unknown key added to every declared object in it."""
    if not isinstance(value, dict) or "properties" not in schema or path in PASS_THROUGH:
        return value
    spoiled = {
        key: _with_unknown_keys(child, schema["properties"][key], f"{path}/{key}", paths)
        for key, child in value.items()
    }
    spoiled[UNKNOWN] = 1
    paths.append(path)
    return spoiled


def test_helm_rejects_an_unknown_key_at_every_level(helm: Helm) -> None:
    values = copy.deepcopy(VALUES)
    # List items have no defaults in values.yaml: give the tenants list one item to spoil.
    values["tenants"] = [
        {"namespace": "team-a", "sessionEditors": [{"kind": "Group", "name": "team-a"}]}
    ]
    paths: list[str] = []
    spoiled = _with_unknown_keys(values, SCHEMA, "", paths)
    spoiled["tenants"] = [
        {
            **values["tenants"][0],
            UNKNOWN: 1,
            "sessionEditors": [{"kind": "Group", "name": "a", UNKNOWN: 1}],
        }
    ]
    paths += ["/tenants/0", "/tenants/0/sessionEditors/0"]
    with pytest.raises(HelmError) as failure:
        helm.template(values=spoiled)
    complaint = r"at '([^']*)': additional properties '(\w+)' not allowed"
    reported = set(re.findall(complaint, failure.value.stderr))
    expected = {(path, UNKNOWN) for path in paths}
    assert reported == expected
    assert len(paths) > 40  # every level: the whole tree was walked


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"template": {"egress": "Everything"}}, "/template/egress"),
        ({"operator": {"replicas": 0}}, "/operator/replicas"),
        ({"trajectoryStore": {"type": "existingClaim"}}, "/trajectoryStore/existingClaim"),
        ({"operator": {"watchNamespaces": ["Team_A"]}}, "/operator/watchNamespaces/0"),
        ({"sandboxes": {"resources": {"memoryLimit": "lots"}}}, "/sandboxes/resources/memoryLimit"),
        ({"tenants": [{"egress": "None"}]}, "/tenants/0"),
    ],
)
def test_helm_rejects_values_of_the_wrong_shape(
    helm: Helm, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(values=values)
    assert f"at '{complaint}'" in failure.value.stderr


@pytest.mark.parametrize("values_file", ci_values_files(), ids=lambda p: Path(p).stem)
def test_helm_lint_passes_strictly_for_each_ci_values_file(helm: Helm, values_file: Path) -> None:
    output = helm.run("lint", "--strict", str(CHART_DIR), "--values", str(values_file))
    assert "1 chart(s) linted, 0 chart(s) failed" in output


def test_there_is_a_ci_values_file_for_each_kind_of_install() -> None:
    names = {path.name for path in ci_values_files()}
    assert names == {
        "default-values.yaml",
        "multi-tenant-values.yaml",
        "hardened-values.yaml",
        "pool-values.yaml",
    }
