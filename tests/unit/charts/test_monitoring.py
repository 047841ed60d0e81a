"""The chart's Grafana dashboard and alert rules query only metrics the code registers.

Every metric name in a dashboard panel, a dashboard variable or an alert expression must be
a series the operator's or the gateway's registry exposes (`x_total`, `x_bucket`, ...), or
Prometheus' own `up`; renaming a metric without the dashboard fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sandfleet.reference.metrics_page import series_names
from sandfleet.reference.pages import metric_registries
from tests.cluster.harness.helm_cli import Helm, Manifest, find, only

PROMETHEUS_OWN = frozenset({"up"})
"""Series Prometheus itself records for every target (what the health panels and the
operator-down alert read)."""
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]")
_OURS = re.compile(r"\bsandfleet_[a-z0-9_]+\b")
_FUNCTIONS_AND_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right"}
)

ENABLED = {"monitoring": {"dashboard": {"enabled": True}, "alerts": {"enabled": True}}}


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> list[Manifest]:
    return helm.template(values=ENABLED)


def _dashboard(rendered: list[Manifest]) -> dict[str, Any]:
    configmap = only(rendered, "ConfigMap", "sandfleet-dashboard")
    (text,) = configmap["data"].values()
    return dict(json.loads(text))


def _dashboard_queries(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            yield query["query"]


def _rule_queries(rendered: list[Manifest]) -> Iterator[str]:
    rule = only(rendered, "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            yield alert["expr"]


def _metrics_in(expression: str) -> set[str]:
    """Metric names of a PromQL expression: selectors (`name{` or `name[`) and our names."""
    selected = {
        name for name in _SELECTOR.findall(expression) if name not in _FUNCTIONS_AND_KEYWORDS
    }
    return selected | set(_OURS.findall(expression))


def test_every_metric_the_dashboard_and_the_rules_query_is_registered(
    rendered: list[Manifest],
) -> None:
    registered = series_names(metric_registries().values())
    queries = [*_dashboard_queries(_dashboard(rendered)), *_rule_queries(rendered)]
    used = {name for query in queries for name in _metrics_in(query)}
    assert used - registered - PROMETHEUS_OWN == set()
    # The dashboard covers each part: sessions, pools, claims, the gateway, reclaims, health.
    for name in (
        "sandfleet_sessions", "sandfleet_gateway_open_sessions", "sandfleet_pool_idle_sandboxes",
        "sandfleet_gateway_claims_total", "sandfleet_gateway_claim_seconds_bucket",
        "sandfleet_gateway_proxied_call_seconds_bucket", "sandfleet_reclaims_total", "up",
    ):  # fmt: skip
        assert name in used, name


def test_a_renamed_metric_would_be_caught() -> None:
    registered = series_names(metric_registries().values())
    assert _metrics_in('sum(rate(sandfleet_gateway_claimz_total{job="x"}[5m]))') - registered
    assert _metrics_in("sum by (le) (rate(sandfleet_pool_claim_seconds_bucket[5m]))") <= registered


def test_the_alerts_name_the_chart_services_and_the_configured_thresholds(helm: Helm) -> None:
    values = {
        "monitoring": {"alerts": {"enabled": True, "poolEmptyFor": "15m", "claimP99Seconds": 2.5}}
    }
    rule = only(helm.template(values=values), "PrometheusRule")
    alerts = {alert["alert"]: alert for alert in rule["spec"]["groups"][0]["rules"]}
    assert set(alerts) == {
        "SandfleetPoolEmpty", "SandfleetClaimSlow", "SandfleetOperatorDown",
        "SandfleetGatewayAuthFailures",
    }  # fmt: skip
    assert alerts["SandfleetPoolEmpty"]["for"] == "15m"
    assert alerts["SandfleetClaimSlow"]["expr"].endswith("> 2.5")
    assert 'job="sandfleet-operator"' in alerts["SandfleetOperatorDown"]["expr"]


def test_off_by_default(helm: Helm) -> None:
    manifests = helm.template()
    assert find(manifests, "PrometheusRule") == []
    assert not [
        m for m in find(manifests, "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")
    ]


def test_the_dashboard_configmap_carries_the_sidecar_label(rendered: list[Manifest]) -> None:
    configmap = only(rendered, "ConfigMap", "sandfleet-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert _dashboard(rendered)["uid"] == "sandfleet-fleet"
