"""Generated gRPC code for the Sandfleet contracts."""
