"""The reference generators read what the code says: docstrings, flags, schemas, registries."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings

from sandfleet.cli.main import build_parser
from sandfleet.reference.cli_page import cli_page
from sandfleet.reference.crd_page import crd_documents, schema_rows
from sandfleet.reference.metrics_page import series_names
from sandfleet.reference.pages import all_flags, metric_registries
from sandfleet.reference.proto_page import proto_page
from sandfleet.reference.settings_page import cli_settings_rows, field_docstrings

ROOT = Path(__file__).resolve().parents[3]


class _Example(BaseSettings):
    first: int = 1
    """The first one."""
    second: str = "x"
    third: bool = False
    """The third,
    on two lines."""


def test_field_docstrings_are_the_strings_below_each_field() -> None:
    assert field_docstrings(_Example) == {
        "first": "The first one.",
        "third": "The third,\non two lines.",
    }


def test_a_setting_without_a_flag_shows_none() -> None:
    rows = {row[0]: row for row in cli_settings_rows(_Example, {"--first": "", "--second": "x"})}
    assert rows["`first`"][1] == "`--first`"
    assert rows["`third`"][1] == "-"
    assert rows["`second`"][4] == "x"  # no docstring: the flag's help
    assert rows["`third`"][3] == "`false`"


def test_every_subcommand_has_a_section() -> None:
    parser = build_parser()
    page = cli_page(parser)
    for name in ("run", "batch", "eval", "show", "runs", "replay", "config", "doctor"):
        assert f"## `{name}` {{#{name}}}" in page
    assert dict(all_flags(parser))["--tool-timeout"].startswith("timeout of one execute_bash")


def test_crd_rows_walk_nested_fields_and_arrays() -> None:
    crds = {
        crd["spec"]["names"]["kind"]: crd for crd in crd_documents(ROOT / "charts/sandfleet/crds")
    }
    assert {"SandboxPool", "SandboxSession", "SandboxTemplate"} <= set(crds)
    schema = crds["SandboxPool"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = [row[0] for row in schema_rows(schema)]
    assert "`spec.replicas`" in paths and "`metadata`" not in paths


def test_series_names_follow_the_metric_types() -> None:
    names = series_names(metric_registries().values())
    assert {"sandfleet_pool_claims_total", "sandfleet_pool_claim_seconds_bucket"} <= names
    assert "sandfleet_pool_idle_sandboxes" in names and "sandfleet_pool_claims" not in names


def test_the_proto_page_lists_each_rpc() -> None:
    page = proto_page(ROOT / "proto")
    assert "| `sandfleet.gateway.v1.GatewayService` | `Claim` | `ClaimRequest` |" in page
