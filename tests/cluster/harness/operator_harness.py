"""The real operator for cluster tests: CRDs and RBAC from manifests/, the operator process
running as its ServiceAccount (a TokenRequest token, so it has exactly the ClusterRole in
manifests/rbac and nothing more), and helpers to wait on sessions. The operator benchmark
(bench/operator_bench/launcher.py) runs the same process class with a few changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import yaml

from tests.cluster.harness.kube_api import ApiError, JsonObject, KubeApi

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
OPERATOR_NAMESPACE = "sandfleet-system"
OPERATOR_ACCOUNT = "sandfleet-operator"
SESSIONS = "/apis/sandfleet.dev/v1alpha1/namespaces/{ns}/sandboxsessions"
POOLS = "/apis/sandfleet.dev/v1alpha1/namespaces/{ns}/sandboxpools"
ALLOWED_MODEL_ENDPOINT = "http://127.0.0.1:*"

_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "CustomResourceDefinition": "customresourcedefinitions",
}


def _object_path(doc: JsonObject) -> str:
    api = doc["apiVersion"]
    prefix = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    ns = doc["metadata"].get("namespace")
    scope = f"/namespaces/{ns}" if ns else ""
    return f"{prefix}{scope}/{_PLURALS[doc['kind']]}"


def apply_sync(kube: KubeApi, doc: JsonObject) -> None:
    """Create, or replace what is there (keeping its resourceVersion)."""
    collection = _object_path(doc)
    path = f"{collection}/{doc['metadata']['name']}"
    current = kube.request_sync("GET", path)
    if current.status == 404:
        kube.checked_sync("POST", collection, doc)
        return
    if doc["kind"] == "Namespace":
        return
    doc = {**doc, "metadata": {**doc["metadata"], **_version(current.body)}}
    kube.checked_sync("PUT", path, doc)


def _version(body: JsonObject) -> JsonObject:
    return {"resourceVersion": body["metadata"]["resourceVersion"]}


def manifest_docs(folder: str) -> list[JsonObject]:
    docs: list[JsonObject] = []
    for path in sorted((MANIFESTS / folder).glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def install_api(kube: KubeApi) -> None:
    """The CRDs (waiting until they are served) and the operator's RBAC."""
    for doc in manifest_docs("crds"):
        apply_sync(kube, doc)
    for doc in manifest_docs("crds"):
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{doc['metadata']['name']}"
        _wait_sync(lambda p=path: _established(kube.checked_sync("GET", p)), 30, path)
    for doc in manifest_docs("rbac"):
        apply_sync(kube, doc)


METRICS_READER = "sandfleet-test-metrics-reader"


def metrics_reader_token(kube: KubeApi) -> str:
    """A token of ServiceAccount sandfleet-test-metrics-reader (operator namespace), allowed
    `get` on the non-resource URL /metrics, as the chart's metrics-reader role allows
    Prometheus: what the operator's and the gateway's /metrics want."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    labels = {"app.kubernetes.io/part-of": "sandfleet-tests"}
    for path, doc in [
        (f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": METRICS_READER}}),
        (f"{rbac}/clusterroles",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
          "metadata": {"name": METRICS_READER, "labels": labels},
          "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        (f"{rbac}/clusterrolebindings",
         {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
          "metadata": {"name": METRICS_READER, "labels": labels},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                      "name": METRICS_READER},
          "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER,
                        "namespace": OPERATOR_NAMESPACE}]}),
    ]:  # fmt: skip
        response = kube.request_sync("POST", path, doc)
        assert response.status in (201, 409), response.body
    answer = kube.checked_sync(
        "POST",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{METRICS_READER}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )  # fmt: skip
    token: str = answer["status"]["token"]
    return token


def _established(crd: JsonObject) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _wait_sync(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout_s}s")
        time.sleep(0.2)


def service_account_kubeconfig(
    kube: KubeApi,
    admin_kubeconfig: Path,
    namespace: str,
    account: str,
    target: Path,
    *,
    expiration_s: int = 3600,
) -> Path:
    """A kubeconfig acting as a ServiceAccount (a TokenRequest token), so a process outside
    the cluster runs with exactly the permissions that account was given."""
    response = kube.checked_sync(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s},
        },
    )
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{**cluster, "name": "test"}],
        "users": [{"name": account, "user": {"token": response["status"]["token"]}}],
        "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
        "current-context": account,
    }
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


def operator_kubeconfig(kube: KubeApi, admin_kubeconfig: Path, target: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount (a 2-hour token)."""
    return service_account_kubeconfig(
        kube, admin_kubeconfig, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, target, expiration_s=7200
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """`python -m sandfleet.operator` as a child process, restartable (and killable)."""

    TIMING_ENV: ClassVar[dict[str, str]] = {
        # Fast control loops: the tests wait for what they do.
        "SANDFLEET_OPERATOR_STATUS_INTERVAL_SECONDS": "1",
        "SANDFLEET_OPERATOR_IDLE_CHECK_INTERVAL_SECONDS": "1",
        "SANDFLEET_OPERATOR_ORPHAN_SWEEP_INTERVAL_SECONDS": "5",
    }

    def __init__(self, kubeconfig: Path, runtime_image: str, workdir: Path, **env: str) -> None:
        self.http_port = free_port()
        self.liveness_port = free_port()
        self.store_dir = workdir / "trajectories"
        self.snapshot_dir = workdir / "snapshots"
        self.log_path = workdir / "operator.log"
        self._env = {
            **os.environ,
            "SANDFLEET_OPERATOR_KUBECONFIG": str(kubeconfig),
            "SANDFLEET_OPERATOR_DEFAULT_IMAGE": runtime_image,
            "SANDFLEET_OPERATOR_IMAGE_PULL_POLICY": "Never",
            # The test node has no cluster DNS; sandboxes use the host's resolver.
            "SANDFLEET_OPERATOR_DNS_POLICY": "Default",
            "SANDFLEET_OPERATOR_HTTP_HOST": "127.0.0.1",
            "SANDFLEET_OPERATOR_HTTP_PORT": str(self.http_port),
            "SANDFLEET_OPERATOR_LIVENESS_PORT": str(self.liveness_port),
            "SANDFLEET_OPERATOR_TRAJECTORY_DIR": str(self.store_dir),
            "SANDFLEET_OPERATOR_SNAPSHOT_DIR": str(self.snapshot_dir),
            # The tests' scripted models listen on 127.0.0.1 (any port); other local
            # addresses (127.0.0.2, "localhost") stand for endpoints the admin did not allow.
            "SANDFLEET_OPERATOR_MODEL_ENDPOINTS_ALLOWED": json.dumps([ALLOWED_MODEL_ENDPOINT]),
            **self.TIMING_ENV,
            **env,
        }
        self._env.pop("KUBECONFIG", None)
        self._process: subprocess.Popen[bytes] | None = None
        self.metrics_token = ""
        """A token allowed `get` on /metrics (metrics_reader_token), set by whoever starts it."""

    @property
    def kubeconfig(self) -> Path:
        return Path(self._env["SANDFLEET_OPERATOR_KUBECONFIG"])

    @property
    def runtime_image(self) -> str:
        return self._env["SANDFLEET_OPERATOR_DEFAULT_IMAGE"]

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def command(self) -> list[str]:
        """The operator's command line (the benchmark wraps it in a profiler)."""
        return [sys.executable, "-m", "sandfleet.operator"]

    def start(self, timeout_s: float = 60.0) -> None:
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            self.command(),
            env=self._env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self._process.poll() is not None:
                raise RuntimeError(f"operator exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()  # not left running (acting on the cluster) after a failed start
                raise TimeoutError(f"operator not healthy after {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            for port in (self.http_port, self.liveness_port):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    pass
        except OSError:
            return False
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as when a node dies under the operator."""
        self.stop(signal.SIGKILL)

    @contextlib.contextmanager
    def configured(self, **env: str) -> Iterator[None]:
        """Runs with `env` over its settings for the block: restarted into it and back out
        (a package-scoped operator keeps its settings for the other tests)."""
        saved = {name: self._env.get(name) for name in env}
        self.stop()
        self._env.update(env)
        self.start()
        try:
            yield
        finally:
            self.stop()
            for name, value in saved.items():
                if value is None:
                    self._env.pop(name, None)
                else:
                    self._env[name] = value
            self.start()

    def metrics(self, timeout_s: float = 5.0) -> str:
        """/metrics, as a scraper allowed to read it (metrics_token: the port checks it)."""
        request = urllib.request.Request(
            f"{self.http_url}/metrics", headers={"Authorization": f"Bearer {self.metrics_token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return str(response.read().decode())

    def log_lines(self) -> list[str]:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace").splitlines()
        return []

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_lines()[-lines:])


def session_body(name: str, spec: JsonObject) -> JsonObject:
    return {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxSession",
        "metadata": {"name": name},
        "spec": spec,
    }


async def create_session(kube: KubeApi, ns: str, name: str, spec: JsonObject) -> JsonObject:
    return await kube.checked("POST", SESSIONS.format(ns=ns), session_body(name, spec))


async def wait_session(
    kube: KubeApi,
    ns: str,
    name: str,
    accept: Callable[[JsonObject], bool],
    timeout_s: float = 90.0,
) -> JsonObject:
    """The session once `accept(session)`; the timeout message shows its last status."""
    path = f"{SESSIONS.format(ns=ns)}/{name}"
    last: dict[str, Any] = {}

    def check(response: Any) -> bool:
        last["body"] = response.body
        return response.status == 200 and accept(response.body)

    try:
        await kube.wait_for(path, check, timeout_s)
    except TimeoutError as exc:
        status = json.dumps((last.get("body") or {}).get("status"), indent=1)
        raise TimeoutError(f"session {ns}/{name} never got there; status: {status}") from exc
    body: JsonObject = last["body"]
    return body


def phase_is(*phases: str) -> Callable[[JsonObject], bool]:
    return lambda body: (body.get("status") or {}).get("phase") in phases


def condition(body: JsonObject, type_: str) -> JsonObject:
    for item in (body.get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return dict(item)
    raise AssertionError(f"no {type_} condition in {body.get('status')}")


async def leftovers(kube: KubeApi, ns: str) -> list[str]:
    """Everything the operator made in `ns` that still exists (pods not yet terminating)."""
    found = []
    selector = "app.kubernetes.io/managed-by=sandfleet-operator"
    for kind in ("pods", "secrets"):
        items = await kube.checked(
            "GET", f"/api/v1/namespaces/{ns}/{kind}?labelSelector={selector}"
        )
        found += [f"{kind}/{i['metadata']['name']}" for i in items["items"]]
    netpols = await kube.checked(
        "GET",
        f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies?labelSelector={selector}",
    )
    found += [f"networkpolicies/{i['metadata']['name']}" for i in netpols["items"]]
    return found


async def wait_no_leftovers(kube: KubeApi, ns: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while remaining := await leftovers(kube, ns):
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind in {ns}: {remaining}")
        await _sleep(0.3)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def api_error_message(exc: ApiError) -> str:
    return str(exc.body.get("message", exc))


@contextlib.contextmanager
def running_operator(
    kube: KubeApi, admin_kubeconfig: Path, runtime_image: str, workdir: Path, **env: str
) -> Iterator[OperatorProcess]:
    install_api(kube)
    kubeconfig = operator_kubeconfig(kube, admin_kubeconfig, workdir / "operator.kubeconfig")
    operator = OperatorProcess(kubeconfig, runtime_image, workdir, **env)
    operator.metrics_token = metrics_reader_token(kube)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


def fetch_trajectory(
    operator: OperatorProcess, ns: str, name: str, token: str
) -> list[dict[str, object]]:
    """The session's trajectory from the operator's HTTP port, as `token`'s holder (one
    allowed to get sandboxsessions in `ns`: the port checks it)."""
    request = urllib.request.Request(
        f"{operator.http_url}/trajectories/{ns}/{name}",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return [json.loads(line) for line in response.read().decode().splitlines()]
