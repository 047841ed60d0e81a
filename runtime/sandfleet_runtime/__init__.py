"""The Sandfleet runtime agent: the gRPC server inside every sandbox (stdlib, grpcio, protobuf only)."""

__version__ = "0.1.0"
