"""The metrics reference page, and the series names a registry exposes (the dashboard test).

Works on any prometheus_client registry without importing the library (only the metrics
modules may): a registry's `collect()` gives the families, and each metric object keeps
its label names. Callers pass the operator's and the gateway's registries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sandfleet.reference.markdown import GENERATED_NOTE, cell, code, table

_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created", ""),
    "gauge": ("",),
    "info": ("_info",),
}
"""The series each metric type exposes, after its family name (the text format's rules)."""


class Registry(Protocol):
    """What this module needs of a prometheus_client CollectorRegistry."""

    def collect(self) -> Iterable[Any]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...]

    @property
    def series(self) -> tuple[str, ...]:
        """The names a scrape shows (`x_total`, `x_bucket`, ...), what queries can use."""
        return tuple(self.name + suffix for suffix in _SUFFIXES.get(self.kind, ("",)))


def families(registry: Registry) -> list[MetricFamily]:
    """Every family of the registry with its label names, sorted by name."""
    labels = _label_names(registry)
    found = {
        family.name: MetricFamily(
            family.name, family.type, family.documentation, labels.get(family.name, ())
        )
        for family in registry.collect()
    }
    return [found[name] for name in sorted(found)]


def _label_names(registry: Registry) -> dict[str, tuple[str, ...]]:
    """Family name -> label names, from the metric objects the registry holds (a labelled
    metric with no child yet has no sample to read them from)."""
    collectors = getattr(registry, "_collector_to_names", {})
    names: dict[str, tuple[str, ...]] = {}
    for collector in collectors:
        name = getattr(collector, "_name", None)
        if isinstance(name, str):
            names[name] = tuple(getattr(collector, "_labelnames", ()))
    return names


def series_names(registries: Iterable[Registry]) -> set[str]:
    """Every series name the registries expose: what a dashboard or a rule may query."""
    return {
        name for registry in registries for family in families(registry) for name in family.series
    }


def metrics_page(components: Mapping[str, Registry]) -> str:
    """Markdown: one table per component (title -> its registry)."""
    lines = [
        "# Metrics",
        "",
        GENERATED_NOTE.format(source="the operator's and the gateway's Prometheus registries"),
        "",
        "Both serve `/metrics` in the Prometheus text format (the gateway's wants a bearer "
        "token allowed `get` on `/metrics`). Counters show as `<name>_total`, histograms as "
        "`<name>_bucket`, `_sum` and `_count`. The chart's Grafana dashboard and alert rules "
        "query these names (a test holds them to this list).",
    ]
    for title, registry in components.items():
        rows = [
            [
                code(f.name),
                f.kind,
                ", ".join(code(label) for label in f.labels) or "-",
                cell(f.help),
            ]
            for f in families(registry)
        ]
        lines += ["", f"## {title}", "", *table(["metric", "type", "labels", "meaning"], rows)]
    return "\n".join(lines) + "\n"
