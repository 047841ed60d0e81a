"""The CRD schemas (manifests/crds and the chart's copy) and the sandfleet.api models agree at
every depth: the same fields, JSON types, enum values, required lists and defaults.

The CRDs are the API as the API server sees it; the models are the API as the operator, the
SDK and the CLI read it. One walk over both, by the models' camelCase aliases, reports every
difference; a change to one side without the other fails here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest
import yaml
from pydantic.fields import FieldInfo

from sandfleet import api

REPOSITORY = Path(__file__).resolve().parents[3]
CRD_FOLDERS = {
    "manifests": REPOSITORY / "manifests" / "crds",
    "chart": REPOSITORY / "charts" / "sandfleet" / "crds",
}
PLURALS = {
    api.SESSION_KIND: api.SESSION_PLURAL,
    api.TEMPLATE_KIND: api.TEMPLATE_PLURAL,
    api.POOL_KIND: api.POOL_PLURAL,
    api.SERVED_MODEL_KIND: api.SERVED_MODEL_PLURAL,
}
MODELS: dict[str, dict[str, type[pydantic.BaseModel]]] = {
    api.SESSION_KIND: {"spec": api.SandboxSessionSpec, "status": api.SandboxSessionStatus},
    api.TEMPLATE_KIND: {"spec": api.SandboxTemplateSpec},
    api.POOL_KIND: {"spec": api.SandboxPoolSpec, "status": api.SandboxPoolStatus},
    api.SERVED_MODEL_KIND: {"spec": api.ServedModelSpec, "status": api.ServedModelStatus},
}
"""The model of each top-level part of each kind; a part without a model must not exist."""

NOT_MODELLED: dict[str, str] = {}
"""CRD fields the models leave out on purpose ("Kind.spec.path" -> why). None today: every
field the API server stores is one the operator or the SDK reads. A pass-through object, e.g.
a whole pod spec kept with x-kubernetes-preserve-unknown-fields, would be listed here with
its reason, and the walk would not descend into it."""

Schema = dict[str, Any]


@functools.cache
def crd_schema(folder: str, kind: str) -> Schema:
    path = CRD_FOLDERS[folder] / f"{PLURALS[kind]}.{api.GROUP}.yaml"
    (crd,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == api.VERSION
    return typing.cast(Schema, version["schema"]["openAPIV3Schema"])


# ---- the walk --------------------------------------------------------------------------


@dataclasses.dataclass
class Comparison:
    """What one walk over a model and its schema found."""

    drift: list[str] = dataclasses.field(default_factory=list)
    """Every difference, as "path: what differs"."""
    shared: list[tuple[str, FieldInfo, Schema]] = dataclasses.field(default_factory=list)
    """(path, model field, CRD property) of every field both sides have, at every depth."""

    def compare_object(self, model: type[pydantic.BaseModel], node: Schema, path: str) -> None:
        if node.get("type") != "object":
            self.drift.append(f"{path}: {model.__name__} is an object, the CRD {node.get('type')}")
            return
        fields = {alias_of(name, field): field for name, field in model.model_fields.items()}
        properties: Schema = node.get("properties", {})
        for alias in sorted(fields.keys() - properties.keys()):
            self.drift.append(f"{path}.{alias}: in {model.__name__}, not in the CRD")
        for alias in sorted(properties.keys() - fields.keys()):
            if f"{path}.{alias}" not in NOT_MODELLED:
                self.drift.append(f"{path}.{alias}: in the CRD, not in {model.__name__}")
        model_required = sorted(alias for alias, field in fields.items() if field.is_required())
        crd_required = sorted(node.get("required", []))
        if model_required != crd_required:
            self.drift.append(
                f"{path}: the CRD requires {crd_required}, {model.__name__} {model_required}"
            )
        for alias in sorted(fields.keys() & properties.keys()):
            if f"{path}.{alias}" in NOT_MODELLED:
                continue
            self.shared.append((f"{path}.{alias}", fields[alias], properties[alias]))
            self.compare_value(fields[alias].annotation, properties[alias], f"{path}.{alias}")

    def compare_value(self, annotation: Any, node: Schema, path: str) -> None:
        shape, inner = unwrap(annotation)
        if shape == "array":
            if node.get("type") != "array" or "items" not in node:
                self.drift.append(f"{path}: the model has a list, the CRD {node.get('type')}")
                return
            self.compare_value(inner, node["items"], f"{path}[]")
            return
        if shape == "map":
            if node.get("type") != "object" or not isinstance(
                node.get("additionalProperties"), dict
            ):
                self.drift.append(f"{path}: the model has a map, the CRD no additionalProperties")
                return
            self.compare_value(inner, node["additionalProperties"], f"{path}{{}}")
            return
        if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
            self.compare_object(inner, node, path)
            return
        expected = json_type(inner)
        if node.get("type") != expected:
            self.drift.append(f"{path}: the model has {expected}, the CRD {node.get('type')}")
            return
        is_time = inner is dt.datetime
        if is_time != (node.get("format") == "date-time"):
            self.drift.append(f"{path}: a date-time on one side only (format {node.get('format')})")
        values = enum_values(inner)
        if values != node.get("enum"):
            self.drift.append(f"{path}: the model allows {values}, the CRD {node.get('enum')}")


def compare(model: type[pydantic.BaseModel], node: Schema, path: str) -> Comparison:
    comparison = Comparison()
    comparison.compare_object(model, node, path)
    return comparison


def alias_of(name: str, field: FieldInfo) -> str:
    assert field.alias is not None, name  # the models generate camelCase aliases
    return field.alias


def unwrap(annotation: Any) -> tuple[str, Any]:
    """(shape, inner type): shape is scalar, array or map; Optional is looked through."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return unwrap(inner)
    if origin is tuple:
        element, ellipsis = typing.get_args(annotation)
        assert ellipsis is Ellipsis, annotation  # lists are tuple[X, ...]
        return "array", element
    if origin is dict:
        return "map", typing.get_args(annotation)[1]
    return "scalar", annotation


def json_type(inner: Any) -> str:
    if typing.get_origin(inner) is Literal:
        kinds = {json_type(type(value)) for value in typing.get_args(inner)}
        assert len(kinds) == 1, inner
        return kinds.pop()
    if isinstance(inner, type) and issubclass(inner, bool):
        return "boolean"
    if isinstance(inner, type) and issubclass(inner, int):
        return "integer"
    if isinstance(inner, type) and issubclass(inner, float):
        return "number"
    if isinstance(inner, type) and issubclass(inner, str | dt.datetime):
        return "string"  # str, StrEnum, and RFC 3339 timestamps
    raise AssertionError(f"no JSON type for {inner!r}")


def enum_values(inner: Any) -> list[Any] | None:
    """The values a model accepts when it accepts only some (an enum or a Literal)."""
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return [member.value for member in inner]
    if typing.get_origin(inner) is Literal:
        return list(typing.get_args(inner))
    return None


def parts() -> list[tuple[str, str, str]]:
    """(CRD folder, kind, top-level part) of every modelled part."""
    return [
        (folder, kind, part) for folder in CRD_FOLDERS for kind in MODELS for part in MODELS[kind]
    ]


def part_id(value: tuple[str, str, str]) -> str:
    return "-".join(value)


# ---- the CRDs against the models -------------------------------------------------------


@pytest.mark.parametrize(("folder", "kind", "part"), parts(), ids=map(part_id, parts()))
def test_model_and_crd_have_the_same_fields_types_enums_and_required_lists(
    folder: str, kind: str, part: str
) -> None:
    node = crd_schema(folder, kind)["properties"][part]
    comparison = compare(MODELS[kind][part], node, f"{kind}.{part}")
    assert comparison.drift == []
    assert comparison.shared  # the walk reached the fields


@pytest.mark.parametrize("folder", CRD_FOLDERS)
@pytest.mark.parametrize("kind", MODELS)
def test_every_top_level_part_of_a_crd_has_its_model(folder: str, kind: str) -> None:
    object_parts = set(crd_schema(folder, kind)["properties"]) - {"apiVersion", "kind", "metadata"}
    assert object_parts == set(MODELS[kind])


@pytest.mark.parametrize(("folder", "kind", "part"), parts(), ids=map(part_id, parts()))
def test_crd_defaults_are_the_model_defaults(folder: str, kind: str, part: str) -> None:
    node = crd_schema(folder, kind)["properties"][part]
    shared = compare(MODELS[kind][part], node, f"{kind}.{part}").shared
    for path, field, prop in shared:
        if "default" not in prop:
            continue
        assert field.annotation is not None, path
        as_model = pydantic.TypeAdapter(field.annotation).validate_python(prop["default"])
        assert as_model == field.get_default(call_default_factory=True), path


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_specs_have_defaults_to_compare(kind: str) -> None:
    node = crd_schema("manifests", kind)["properties"]["spec"]
    shared = compare(MODELS[kind]["spec"], node, kind).shared
    assert any("default" in prop for _, _, prop in shared)  # e.g. maxTurns, workdir, replicas


def test_every_field_left_out_of_the_models_is_in_the_crd() -> None:
    for path in NOT_MODELLED:
        kind, *names = path.split(".")
        node = crd_schema("manifests", kind)
        for name in names:
            node = node.get("properties", {}).get(name) or node.get("items", {})
            assert node, path


# ---- the walk finds drift --------------------------------------------------------------


class _Inner(api.ApiModel):
    size: int


class _Spec(api.ApiModel):
    name: str
    mode: Literal["A", "B"] = "A"
    phase: api.Phase | None = None
    when: dt.datetime | None = None
    tags: tuple[str, ...] = ()
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    inner: _Inner | None = None
    retry_count: int = 0


def _schema() -> Schema:
    return {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "mode": {"type": "string", "enum": ["A", "B"]},
            "phase": {"type": "string", "enum": [p.value for p in api.Phase]},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "inner": {
                "type": "object",
                "required": ["size"],
                "properties": {"size": {"type": "integer"}},
            },
            "retryCount": {"type": "integer"},
        },
    }


def test_the_walk_finds_nothing_in_a_model_and_schema_that_agree() -> None:
    assert compare(_Spec, _schema(), "x").drift == []


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda s: s["properties"].pop("retryCount"), "x.retryCount: in _Spec, not in the CRD"),
        (
            lambda s: s["properties"].update(extra={"type": "string"}),
            "x.extra: in the CRD, not in _Spec",
        ),
        (
            lambda s: s["properties"]["retryCount"].update(type="string"),
            "x.retryCount: the model has integer, the CRD string",
        ),
        (
            lambda s: s["properties"]["inner"]["properties"]["size"].update(type="boolean"),
            "x.inner.size: the model has integer, the CRD boolean",
        ),
        (
            lambda s: s["properties"]["tags"].update(type="string"),
            "x.tags: the model has a list, the CRD string",
        ),
        (
            lambda s: s["properties"]["labels"].pop("additionalProperties"),
            "x.labels: the model has a map, the CRD no additionalProperties",
        ),
        (
            lambda s: s["properties"]["mode"].update(enum=["A", "B", "C"]),
            "x.mode: the model allows ['A', 'B'], the CRD ['A', 'B', 'C']",
        ),
        (
            lambda s: s["properties"]["phase"].pop("enum"),
            "x.phase: the model allows ['Pending', 'Starting', 'Ready', 'Running', 'Suspended',"
            " 'Succeeded', 'Failed', 'Expired'], the CRD None",
        ),
        (
            lambda s: s["properties"]["name"].update(enum=["a"]),
            "x.name: the model allows None, the CRD ['a']",
        ),
        (
            lambda s: s["properties"]["when"].pop("format"),
            "x.when: a date-time on one side only (format None)",
        ),
        (
            lambda s: s.update(required=[]),
            "x: the CRD requires [], _Spec ['name']",
        ),
        (
            lambda s: s["properties"]["inner"].update(required=["size", "other"]),
            "x.inner: the CRD requires ['other', 'size'], _Inner ['size']",
        ),
    ],
)
def test_the_walk_reports_each_kind_of_drift(
    change: typing.Callable[[Schema], Any], found: str
) -> None:
    schema = _schema()
    change(schema)
    assert compare(_Spec, schema, "x").drift == [found]


# ---- what the schemas cannot say -------------------------------------------------------


def test_the_models_enforce_the_crds_cel_rules_too() -> None:
    with pytest.raises(pydantic.ValidationError, match="at most one of templateRef"):
        api.SandboxSessionSpec.model_validate({"template": {}, "poolRef": {"name": "p"}})
    with pytest.raises(pydantic.ValidationError, match="exactly one of content"):
        api.FileSource.model_validate(
            {"path": "a", "content": "x", "secretKeyRef": {"name": "s", "key": "k"}}
        )
    with pytest.raises(pydantic.ValidationError, match="at most one of templateRef"):
        api.SandboxPoolSpec.model_validate({"template": {}, "templateRef": {"name": "t"}})


def test_a_status_as_the_api_server_returns_it_reads_into_the_status_model() -> None:
    status = api.SandboxSessionStatus.model_validate(
        {
            "phase": "Succeeded",
            "podIP": "10.0.0.7",
            "restarts": 1,
            "startTime": "2026-01-02T03:04:05Z",
            "conditions": [
                {"type": "Completed", "status": "True", "reason": "Submitted",
                 "lastTransitionTime": "2026-01-02T03:09:00Z", "observedGeneration": 1},
            ],
            "agent": {"turns": 3, "promptTokens": 10, "stopReason": "submitted"},
            "someFutureField": "ignored",
        }
    )  # fmt: skip
    assert status.phase is api.Phase.SUCCEEDED and status.pod_ip == "10.0.0.7"
    assert status.start_time == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert status.conditions[0].reason == api.Reason.SUBMITTED
    assert status.agent is not None and status.agent.prompt_tokens == 10
    assert api.SandboxSessionStatus().restarts == 0  # the operator writes nothing yet
