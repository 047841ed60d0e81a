"""Every generated reference page, by its path under the docs site's reference/ folder."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from pydantic_settings import BaseSettings

from sandfleet.reference.cli_page import cli_page
from sandfleet.reference.crd_page import crd_documents, crd_page
from sandfleet.reference.metrics_page import Registry, metrics_page
from sandfleet.reference.proto_page import proto_page
from sandfleet.reference.settings_page import settings_page


def all_flags(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(option string, its help) of the parser and its subcommands (suppressed help: "")."""
    for action in parser._actions:
        shown = action.help if action.help and action.help != argparse.SUPPRESS else ""
        for flag in action.option_strings:
            yield flag, shown
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_flags(sub)


def metric_registries() -> dict[str, Registry]:
    """The operator's and the gateway's registries, fresh (every fixed series at zero)."""
    from sandfleet.gateway.metrics import GatewayMetrics
    from sandfleet.operator.metrics import OperatorMetrics

    return {"Operator": OperatorMetrics().registry, "Gateway": GatewayMetrics().registry}


def reference_pages(root: Path) -> dict[str, str]:
    """Markdown by file name; `root` is the repository (for the CRD and proto files)."""
    from sandfleet.cli.main import build_parser
    from sandfleet.gateway.settings import GatewaySettings
    from sandfleet.mcp.endpoint import EndpointSettings
    from sandfleet.operator.settings import OperatorSettings
    from sandfleet.settings import Settings

    parser = build_parser()
    servers: dict[str, type[BaseSettings]] = {
        "Operator": OperatorSettings,
        "Gateway": GatewaySettings,
        "MCP endpoint (the chart's mcp Deployment)": EndpointSettings,
    }
    return {
        "cli.md": cli_page(parser),
        "settings.md": settings_page(Settings, dict(all_flags(parser)), servers),
        "crds.md": crd_page(crd_documents(root / "charts" / "sandfleet" / "crds")),
        "metrics.md": metrics_page(metric_registries()),
        "grpc.md": proto_page(root / "proto"),
    }
