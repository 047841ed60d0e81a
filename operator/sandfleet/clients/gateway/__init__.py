"""The gateway's client: its calls (client) and where the gateway's address and the caller's
token come from (target: flags, environment, kubeconfig)."""
