"""Platform policy for one operator process: read once from SANDFLEET_OPERATOR_* at start-up.

Per-session behaviour lives in the SandboxSession spec; these are the platform's caps,
defaults and wiring (namespaces, ports, the trajectory store, client rate limits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, IPvAnyNetwork, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandfleet.api.common import QUANTITY_PATTERN
from sandfleet.operator.model_endpoints import EndpointRule
from sandfleet.version import __version__


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SANDFLEET_OPERATOR_",
        frozen=True,
        extra="forbid",
        env_nested_delimiter="__",
    )

    log_level: str = Field(default="INFO", validation_alias="SANDFLEET_LOG_LEVEL")
    """Level of the operator's log lines (and kopf's); shares SANDFLEET_LOG_LEVEL with the
    CLI, so it has no SANDFLEET_OPERATOR_ prefix."""

    namespaces: list[str] = []
    """Namespaces to serve; empty serves the whole cluster (needs the ClusterRole)."""
    kubeconfig: Path | None = None
    """None: $KUBECONFIG, ~/.kube/config, then the in-cluster service account."""

    default_image: str = f"sandfleet-sandbox:{__version__}"
    """Sandbox image for sessions and pools that name none: the name `images/build.sh sandbox`
    gives it (the chart passes its registry-qualified `sandboxes.image`)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    default_cpu_request: str = "10m"
    default_memory_request: str = "64Mi"
    default_memory_limit: str = "512Mi"
    default_ephemeral_storage_request: str = Field(default="64Mi", pattern=QUANTITY_PATTERN)
    default_ephemeral_storage_limit: str = Field(default="1Gi", pattern=QUANTITY_PATTERN)
    """Disk one sandbox may fill (writable layer, logs): past it the kubelet evicts the pod.
    Applied to every sandbox, whatever its template's resources say."""
    max_upload_bytes: int = Field(default=128 * 1024 * 1024, ge=1)
    """Largest file one upload into a sandbox may write (the runtime's
    SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES, set on every sandbox pod)."""
    dns_policy: Literal["ClusterFirst", "Default"] = "ClusterFirst"
    dns_namespace: str = "kube-system"
    """Namespace of the cluster resolver's pods: egress Internet's port 53 goes there only."""
    dns_pod_labels: dict[str, str] = Field(default={"k8s-app": "kube-dns"}, min_length=1)
    """Labels of the cluster resolver's pods (CoreDNS and kube-dns: k8s-app=kube-dns)."""
    dns_cidrs: list[IPvAnyNetwork] = []
    """More resolvers egress Internet's port 53 may reach (CIDRs), e.g. NodeLocal DNSCache's
    169.254.20.10/32, or the node's resolver with dns_policy Default."""
    default_scheduler_name: str | None = None
    """Scheduler for sandbox pods whose template names none (e.g. the chart's bin-packing
    scheduler); None: the cluster's default."""
    default_model_base_url: str | None = None
    """Endpoint for managed sessions that set neither baseURL nor apiKeySecretRef."""
    default_model_api_key_file: Path | None = None
    """File holding the API key for `default_model_base_url` (a mounted Secret; read at
    each session start, so a rotated key needs no restart). Never sent to an endpoint a
    session picked itself."""
    model_endpoints_allowed: list[str] = []
    """Model endpoints managed sessions may name in baseURL (and so send their key Secret
    to): URL prefixes `scheme://host[:port][/path]`, host `*.example.com` for its subdomains,
    port `*` for any. No port: the scheme's default. `default_model_base_url` is always
    allowed; OpenAI's own endpoint (a session without baseURL) only when listed. Empty: the
    default endpoint only. Set by the platform admin, never by a tenant."""
    operator_namespace: str = "sandfleet-system"
    """Where the operator's pods run: sandbox NetworkPolicies admit ingress from there only."""
    operator_pod_labels: dict[str, str] = {"app.kubernetes.io/name": "sandfleet-operator"}
    gateway_pod_labels: dict[str, str] = {"app.kubernetes.io/name": "sandfleet-gateway"}
    """Labels of the gateway's pods (in `operator_namespace`): sandboxes admit them too."""
    session_key_file: Path | None = None
    """The fleet's session key (a mounted Secret, shared with the gateway): the runtime
    tokens of gateway-claimed sessions derive from it. None: such sessions fail."""
    orphan_claim_grace_seconds: float = Field(default=60.0, ge=0)
    """A pod claimed by the gateway whose session still does not exist after this long (the
    gateway died between claim and create) is deleted by the sweep."""

    http_host: str = "0.0.0.0"
    http_port: int = 8080
    """/metrics and /trajectories; 0 picks a free port (tests)."""
    liveness_port: int = 8081
    """kopf's /healthz; 0 disables it."""

    trajectory_dir: Path = Path("/var/lib/sandfleet/trajectories")
    trajectory_retention_seconds: int = Field(default=7 * 24 * 3600, ge=60)

    snapshot_dir: Path | None = None
    """Where suspended sessions' snapshots are kept (a mounted volume: the chart's
    PersistentVolumeClaim). None: no snapshot store, and a suspend is refused with a condition."""
    snapshot_limit_bytes: int = Field(default=1024**3, ge=1)
    """Largest snapshot a suspend may store; a bigger one is refused and the sandbox runs on."""

    kube_qps: float = Field(default=200.0, gt=0)
    """Sustained Kubernetes API requests per second (a token bucket)."""
    kube_burst: int = Field(default=400, ge=1)
    pool_pod_creates_per_second: float = Field(default=20.0, gt=0)
    """Pool refills create at most this many pods a second, all pools together (a token
    bucket inside kube_qps): a fleet of pools refilling at once must not crowd out the
    session writes and every other client of the API server."""
    pool_pod_create_burst: int = Field(default=100, ge=1)
    """Pod creations allowed at once above the rate (one refill batch, across pools)."""

    status_interval_seconds: float = Field(default=5.0, ge=0)
    """A running agent's status (turns, tokens) is written at most this often; phase
    changes are written at once."""
    runtime_bind_timeout_seconds: float = Field(default=60.0, gt=0)
    """How long a started pod's runtime may take to accept the session's binding."""
    pod_start_timeout_seconds: float = Field(default=600.0, gt=0)
    """A pod still not running after this long fails the session (PodUnschedulable/...)."""
    idle_check_interval_seconds: float = Field(default=15.0, gt=0)
    orphan_sweep_interval_seconds: float = Field(default=300.0, gt=0)
    """The sweep lists every managed pod, Secret, NetworkPolicy, session and pool: at
    thousands of sessions that is megabytes of JSON, so not too often."""
    pool_claim_attempts: int = Field(default=8, ge=1)
    """Idle pods tried per claim before the session falls back to a cold start."""

    peering: str | None = None
    """kopf peering name (a standby replica takes over when the active one dies); None runs
    standalone, which is right for one replica. The ClusterKopfPeering (or, with
    `namespaces`, KopfPeering) of that name must exist."""
    peering_priority: int | None = None
    """The highest priority among peers is active, the others stand by; equal priorities
    would pause them all, so None picks a random one at start."""
    peering_lifetime_seconds: int = Field(default=60, ge=2)
    """A peer not heard from for this long is gone: a standby takes over after it."""

    @field_validator("model_endpoints_allowed")
    @classmethod
    def _endpoints_parse(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            EndpointRule.parse(entry)  # a bad entry stops the operator at start-up
        return entries
