"""The CRD reference page, from the CustomResourceDefinitions' OpenAPI schemas (YAML files)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sandfleet.reference.markdown import GENERATED_NOTE, cell, code, table

_SKIPPED_ROOTS = frozenset({"apiVersion", "kind", "metadata"})
"""Fields every Kubernetes object has: the page documents the resource's own."""


def crd_documents(folder: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the YAML files of `folder`, sorted by kind."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                found.append(document)
    return sorted(found, key=lambda crd: str(crd["spec"]["names"]["kind"]))


def schema_rows(schema: Mapping[str, Any], prefix: str = "") -> Iterator[list[str]]:
    """One row per field, depth first: path, type, required, default, description."""
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        if not prefix and name in _SKIPPED_ROOTS:
            continue
        path = f"{prefix}.{name}" if prefix else name
        yield [
            code(path), code(_type(sub)), "yes" if name in required else "",
            code(sub["default"]) if "default" in sub else "-", cell(_description(sub)),
        ]  # fmt: skip
        yield from schema_rows(sub, path)
        items = sub.get("items")
        if isinstance(items, Mapping):
            yield from schema_rows(items, path + "[]")


def _type(schema: Mapping[str, Any]) -> str:
    kind = str(schema.get("type", "object"))
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"[]{schema['items'].get('type', 'object')}"
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    if "enum" in schema:
        return kind + ": " + " / ".join(str(value) for value in schema["enum"])
    return kind


def _description(schema: Mapping[str, Any]) -> str:
    text = str(schema.get("description", ""))
    bounds = [
        f"{word} `{schema[key]}`"
        for key, word in (("minimum", "min"), ("maximum", "max"), ("pattern", "pattern"))
        if key in schema
    ]
    return text + (f" ({'; '.join(bounds)})" if bounds else "")


def crd_page(crds: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per CRD, its names and printer columns, then every field of each version."""
    lines = [
        "# Custom resources",
        "",
        GENERATED_NOTE.format(source="the CRDs' OpenAPI schemas (`charts/sandfleet/crds`)"),
    ]
    for crd in crds:
        spec = crd["spec"]
        names = spec["names"]
        short = ", ".join(f"`{name}`" for name in names.get("shortNames", ())) or "-"
        lines += [
            "",
            f"## {names['kind']}",
            "",
            f"`{crd['metadata']['name']}` ({spec['scope']}; short names {short})",
        ]
        for version in spec["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            lines += ["", f"### {spec['group']}/{version['name']}", ""]
            if schema.get("description"):
                lines += [" ".join(str(schema["description"]).split()), ""]
            lines += table(
                ["field", "type", "required", "default", "meaning"], list(schema_rows(schema))
            )
    return "\n".join(lines) + "\n"
