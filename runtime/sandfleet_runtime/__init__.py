"""The Sandfleet runtime agent: the gRPC server in every sandbox (stdlib, grpcio, protobuf)."""

__version__ = "0.1.0"
