"""Generated gRPC code for the Sandfleet runtime contract."""
