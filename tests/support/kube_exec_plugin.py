"""A real client-go exec credential plugin (a small script) and kubeconfigs that use it.

The script is what `aws eks get-token`, `gke-gcloud-auth-plugin` or `kubelogin` are to a real
kubeconfig: the client runs it, it prints an ExecCredential with a token and its
expirationTimestamp. Its behaviour is steered through files in its state directory, so a
test can change it between runs:

- `token`: print this token (default: `exec-token-N`, N counting the runs);
- `expires_in`: seconds until the printed token expires (default 3600);
- `mode`: `fail` exits 3 with a message on stderr, `garbage` prints something not JSON;
- `runs` (written by the script): how often it ran; `exec_info`: the KUBERNETES_EXEC_INFO
  the client passed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"

_SCRIPT = """\
#!{python}
import datetime, json, os, pathlib, sys

state = pathlib.Path(os.environ["SANDFLEET_TEST_PLUGIN_STATE"])
def read(name, default=None):
    path = state / name
    return path.read_text().strip() if path.exists() else default

runs = int(read("runs", "0")) + 1
(state / "runs").write_text(str(runs))
(state / "exec_info").write_text(os.environ.get("KUBERNETES_EXEC_INFO", ""))
mode = read("mode", "ok")
if mode == "fail":
    print("the token service said no", file=sys.stderr)
    sys.exit(3)
if mode == "garbage":
    print("Please log in at https://login.example")
    sys.exit(0)
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
    seconds=float(read("expires_in", "3600"))
)
status = {{
    "token": read("token") or f"exec-token-{{runs}}",
    "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
}}
print(json.dumps({{"apiVersion": "{api_version}", "kind": "ExecCredential", "status": status}}))
"""


class ExecPlugin:
    """The plugin script and its state directory under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.state = directory / "plugin-state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.command = directory / "credential-plugin"
        self.command.write_text(_SCRIPT.format(python=sys.executable, api_version=EXEC_API_VERSION))
        self.command.chmod(0o755)

    def set(self, name: str, value: object) -> None:
        (self.state / name).write_text(str(value))

    def clear(self, name: str) -> None:
        (self.state / name).unlink(missing_ok=True)

    @property
    def runs(self) -> int:
        path = self.state / "runs"
        return int(path.read_text()) if path.exists() else 0

    def user(self) -> dict[str, Any]:
        """The kubeconfig `user` section that runs this plugin."""
        return {
            "exec": {
                "apiVersion": EXEC_API_VERSION,
                "command": str(self.command),
                "env": [{"name": "SANDFLEET_TEST_PLUGIN_STATE", "value": str(self.state)}],
                "interactiveMode": "Never",
            }
        }


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    namespace: str | None = None,
) -> Path:
    """A one-context kubeconfig file (context `test`) for `server` and `user`."""
    context: dict[str, Any] = {"cluster": "test", "user": "test"}
    if namespace:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": context}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path
