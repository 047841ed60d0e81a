"""Cluster tests of the gateway's claim path (a package, so its operator fixture ends with it)."""
