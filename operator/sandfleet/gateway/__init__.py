"""sandfleet-gateway: the fleet's authenticated front door (claims, quotas, the runtime proxy)."""
